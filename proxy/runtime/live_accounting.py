"""The live observer's accounting: client usage, conversion, per-signal yield, memory gauges.

Why apart from the hooks: the hooks (`live_policy.py`) decide what the core learns; this decides
what the proxy *reports* about its own actions. Conversion: the core attributes each request to the
executed action (if any) that prepared its context or anchor within `conversion_window_s`; the
engine's `cached_tokens` confirm it (at least CONVERSION_SHARE of the action's tokens), and the
action's tokens count as converted for its reason — one rule for live and replay. Yield: an executed
action's signal is charged what the engine prefilled for it and credited what a confirmed hit saved
beyond the no-action counterfactual (`core/yield_ledger.py`, `runtime/switchback.py`). A mixin of
`LivePolicyObserver`, so it reads the observer's own state.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from proxy.core.actions import ANCHOR_REASONS
from proxy.core.yield_book import CONVERSION_SHARE, YieldBook, ran_alongside_traffic

if TYPE_CHECKING:
    from proxy.core.actions import Action
    from proxy.core.policy import ScoutPolicy
    from proxy.engines.base import WarmResult
    from proxy.observability.metrics import ProxyMetrics
    from proxy.runtime.hint_inputs import HintService
    from proxy.runtime.prefill import PrefillRate
    from proxy.runtime.request_state import RequestState
    from proxy.runtime.response_tap import ResponseTap, TapBudget
    from proxy.runtime.switchback import SelfEvaluation

MAX_ACTED = 4096  # executed actions whose anchor priority is remembered


class UsageAccounting:
    """Usage, conversion and yield bookkeeping for `LivePolicyObserver` (which owns these attributes)."""

    policy: ScoutPolicy
    metrics: ProxyMetrics | None
    counts: dict[str, int]
    token_ratio: float | None
    prefill: PrefillRate | None
    selfeval: SelfEvaluation | None
    hints: HintService | None
    tap_budget: TapBudget
    _inflight: dict[int, float]
    _last_request_at: float
    _last_response_at: float
    _anchor_priority: OrderedDict[str, tuple[int, float]]
    _yield_book: YieldBook
    _drops_seen: dict[str, int]
    _skips_seen: dict[tuple[str, str], int]

    def _learn_from_usage(self, st: RequestState, tap: ResponseTap, started: float) -> None:
        """A client response's engine usage: counted (and conversion), and the engine truths it
        calibrates: the prefill rate (streamed: computed tokens over TTFT) and the ratio of the
        engine's tokens to the view's estimate."""
        prompt, cached = int(tap.prompt_tokens or 0), int(tap.cached_tokens or 0)
        self._count_usage(st, prompt, cached)
        if self.prefill is not None and tap.stream and tap.first_token_at is not None:
            self.prefill.add_request(prompt - cached, tap.first_token_at - started, alone=st.alone)
        est = st.view.total_tokens if st.view is not None else 0
        if est > 0:  # calibrate the view's token estimate against the engine's tokenizer
            r = prompt / est
            self.token_ratio = r if self.token_ratio is None else 0.95 * self.token_ratio + 0.05 * r

    def _count_usage(self, st: RequestState, prompt: int, cached: int) -> None:
        """Client usage, and conversion: the core attributes a request to the action that prepared
        its context or anchor (one rule, one window: `conversion_window_s`); it counts as converted
        when the engine confirms the hit (cached >= CONVERSION_SHARE of the action's tokens)."""
        self.counts["prompt_tokens"] += prompt
        self.counts["cached_tokens"] += cached
        if self.metrics is not None:
            self.metrics.prompt_tokens_total.inc(prompt)
            self.metrics.cached_prompt_tokens_total.inc(cached)
        obs = st.observed
        reason = obs.acted_reason if obs is not None else None
        if obs is None or not reason or cached <= 0:
            return
        tokens = int(obs.acted_tokens * (self.token_ratio or 1.0))  # view -> engine tokens
        if cached >= CONVERSION_SHARE * min(tokens, prompt):
            self.counts["converted_tokens"] += tokens
            if self.metrics is not None:
                self.metrics.converted_tokens_total.labels(reason).inc(tokens)

    def on_action_result(self, action: Action, result: WarmResult, now: float) -> None:
        """Executor callback: report to the core, remember warmed prefixes for conversion."""
        computed = None
        if result.ok and result.prompt_tokens:  # engine tokens -> the views' token estimate
            computed = result.computed_tokens / max(0.05, self.token_ratio or 1.0)
        self.policy.record_action_result(action, bool(result.ok), now, computed)
        if result.ok and action.reason in ANCHOR_REASONS:
            self._anchor_priority[action.anchor_id] = (int(action.priority), now)
            self._anchor_priority.move_to_end(action.anchor_id)
            while len(self._anchor_priority) > MAX_ACTED:
                self._anchor_priority.popitem(last=False)

    # -- yield per signal (runtime/switchback.SelfEvaluation) ---------------------------------------
    def note_action(self, action: Action, result: WarmResult, now: float) -> None:
        """An executed action, before the core marks its blocks fresh (LiveRuntime calls this just
        before `on_action_result`): charge its signal what the engine prefilled for it, and keep what
        the yield counterfactual needs (core/yield_book.py)."""
        if self.selfeval is None or not result.ok or not action.block_hashes:
            return
        # no usage reported (some adapters): charge a warm its whole prefix, a touch nothing
        spent = result.computed_tokens if result.prompt_tokens else (action.tokens if action.kind == "warm" else 0)
        spent = self._yield_book.charge(
            action, self.policy.residency, int(result.prompt_tokens or 0), int(result.cached_tokens or 0), spent
        )
        # contended: a client request overlapped the action's run (core/yield_book.py)
        sent = result.sent_at if result.sent_at is not None else action.created
        contended = ran_alongside_traffic(sent, bool(self._inflight), self._last_request_at, self._last_response_at)
        self.selfeval.record_spent(action.reason, spent, contended, now)

    def _credit_yield(self, st: RequestState, prompt: int, cached: int, now: float) -> None:
        """A client request the core attributed to an executed action (its context or anchor, within
        `conversion_window_s`): when the engine confirms the hit, credit the signal what the hit saved
        beyond the no-action counterfactual (core/yield_book.py)."""
        obs, view = st.observed, st.view
        if obs is None or view is None:
            return
        reason, h = obs.acted_reason, obs.acted_hash
        if not reason or h is None:
            return
        acted = int(obs.acted_tokens * (self.token_ratio or 1.0))
        saved = self._yield_book.credit(view.tenant, h, acted, prompt, cached, self.policy.residency)
        if saved is not None:
            assert self.selfeval is not None, "the only caller checks selfeval first"
            self.selfeval.record_saved(reason, saved, now)

    def update_gauges(self) -> None:
        if self.metrics is None:
            return
        self._memory_metrics(self.metrics)
        self._planner_skips(self.metrics)
        if self.hints is not None:
            self.hints.update_gauges()
        # The core caches R between refreshes; asking before any transitions were learned would pin
        # R at 0 for the next refresh window, so gauges start once the gate could first open.
        if self.policy.requests <= self.policy.config.r_min_transitions:
            return
        s = self.policy.stats()
        self.metrics.predictability_ratio.set(float(s.predictability))
        self.metrics.agents.set(s.agents)
        self.metrics.sessions.set(s.sessions)

    def _planner_skips(self, m: ProxyMetrics) -> None:
        """Planner.rec.by_piece ((piece, skip reason) pairs: core/plan_registry.SKIP_PAIRS) -> counter
        increments since the last tick."""
        seen = self._skips_seen
        for key, n in self.policy.planner.rec.by_piece.items():
            was = seen.get(key, 0)
            if n > was:
                m.planner_skips_total.labels(key[1], key[0]).inc(n - was)
            seen[key] = n

    def _memory_metrics(self, m: ProxyMetrics) -> None:
        """Byte budgets -> metrics: drops since the last tick as counter increments, kept bytes as gauges."""
        policy = self.policy
        sessions = policy.sessions
        now = {
            "sessions": sessions.dropped_for_bytes,
            "fanout": policy.fanout_dropped,
            "tap": self.tap_budget.overflows,
            "agents": policy.agents.dropped_for_bytes,
        }
        seen = self._drops_seen
        for store, n in now.items():
            if n > seen.get(store, 0):
                m.memory_drops_total.labels(store).inc(n - seen.get(store, 0))
            seen[store] = n
        m.kept_bytes.labels("sessions").set(sessions.bytes)
        m.kept_bytes.labels("tap").set(self.tap_budget.used)
        m.kept_bytes.labels("agents").set(policy.agents.bytes)
        c = self.counts
        shed = c["body_too_large"] + c["offload_full"] + c["parse_budget"]
        m.policy_shed_ratio.set(shed / c["requests"] if c["requests"] else 0.0)
        m.kept_bytes.labels("prefix_index").set(policy.agents.index.bytes)
