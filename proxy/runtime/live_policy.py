"""The RequestObserver that feeds the policy core from live traffic, and plans from it.

Why the work is deferred: the forwarder calls these hooks synchronously before it sends the
request upstream, so `on_request` only bookkeeps (microseconds) and schedules the real work —
building the canonical view (JSON canonicalisation + xxh3 over the prompt), `observe_request`,
`plan` — with `loop.call_soon`, which runs once the forwarder has yielded to the network. Responses
are read from the side by a `ResponseTap`; `on_response_end` again defers. FIFO scheduling keeps
request before response for each id.

What is never learned from: the proxy's own warmups (they go straight to the adapter, never through
the forwarder), client requests carrying the warmup header or `max_tokens <= 1` (the core's view
marks them), and requests the engine did not accept: `observe_request` waits until the response
status is known and runs only for a 2xx (a client with a wrong API key must not be able to make the
proxy warm its text with the proxy's own credentials). Optionally (`policy_client_auth_sha256`)
only clients whose Authorization / x-api-key header hashes to an allowed value drive the policy.
Bodies over `policy_max_body_bytes` are not read by the policy; bodies over
`policy_inline_parse_bytes` are parsed and viewed on a worker thread (`runtime/offload.py`); the
session context is kept as the body bytes (`runtime/payload.py`), not as parsed JSON.

Conversion accounting: the core attributes each request to the executed action (if any) that
prepared its context or anchor within `conversion_window_s`; the engine's `cached_tokens` confirm
it (at least CONVERSION_SHARE of the action's tokens), and the action's tokens count as converted
for its reason. One rule for live and replay.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from proxy.core.economics import RunningSet
from proxy.core.fingerprint import view_from_openai
from proxy.core.view import EngineLoad, RequestView, ResponseOutcome
from proxy.core.yield_ledger import counterfactual_cached, remaining_life
from proxy.engines.base import WarmResult
from proxy.runtime.hint_inputs import request_hints, strip_fields
from proxy.runtime.offload import ObserveLimits, ParseOffload
from proxy.runtime.payload import BodyPayload
from proxy.runtime.response_tap import ResponseTap, TapBudget

log = logging.getLogger("cachescout.live_policy")

OBSERVED_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages")
WARMUP_HEADER = "x-cachescout-warmup"
CONVERSION_SHARE = 0.8  # cached >= 80% of the warmed prompt counts as converted
MAX_ACTED = 4096
STALE_INFLIGHT_S = 900.0
HINT_TTL_S = 60.0  # an anchor's action priority is used for forwarded requests this long
ANCHOR_REASONS = ("transition", "fanout", "hint")


AUTH_HEADERS = ("authorization", "x-api-key")


class _ReqState:
    __slots__ = (
        "accepted",
        "alone",
        "done",
        "end",
        "held",
        "hints",
        "observed",
        "parsing",
        "skip",
        "status",
        "tap",
        "view",
    )

    def __init__(self) -> None:
        self.alone = False
        self.held = False  # its blocks are counted in the running set
        self.hints: Any = None
        self.view: RequestView | None = None
        self.observed: Any = None
        self.tap: ResponseTap | None = None
        self.status: int | None = None
        self.skip = False
        self.accepted = False  # the engine answered 2xx: only then is the request learned
        self.parsing = False  # the view is being built on the worker thread
        self.end: tuple | None = None  # (error, now) once the response ended
        self.done = False  # its response was observed


class LivePolicyObserver:
    """Implements proxy.http.observer.RequestObserver on top of a ScoutPolicy."""

    def __init__(
        self,
        policy: Any,
        metrics: Any,
        clock: Callable[[], float],
        *,
        block_chars: int = 64,
        chars_per_token: float = 4.0,
        defer: bool = True,
    ) -> None:
        self.policy = policy
        self.metrics = metrics
        self.clock = clock
        self.block_chars = block_chars
        self.chars_per_token = chars_per_token
        self.defer = defer
        self.executor: Any = None  # set by LiveRuntime (submit(actions))
        self.engine_waiting: Callable[[], int] = lambda: 0
        self._inflight: dict[int, float] = {}
        self._states: dict[int, _ReqState] = {}  # in flight: first token seen yet? (slack)
        self.running = RunningSet()  # distinct view tokens of the requests in flight
        self.utilisation = 0.0  # engine prefill busy share (LiveRuntime, scraped)
        self.deferred = 0  # call_soon work scheduled but not yet run
        self.prefill: Any = None  # PrefillRate: streamed requests' computed tokens / TTFT
        self.token_ratio: float | None = None  # engine tokens per estimated view token (EWMA)
        # Opt-in engine hints on forwarded requests (kv_hints / request_priority): LiveRuntime sets
        # `extras_for` to the adapter's request_extras and switches `rewrite_enabled` on.
        self.rewrite_enabled = False
        self.extras_for: Callable[[float | None], dict] = lambda survival: {}
        self._anchor_priority: OrderedDict[str, tuple[int, float]] = OrderedDict()
        # Runtime hints (proxy.runtime.hint_inputs.HintService), set by LiveRuntime; strip_hint_fields:
        # the operator asked to forward bodies without the engines' proposal fields.
        self.hints: Any = None
        self.strip_hint_fields = False
        self.selfeval: Any = None  # runtime.switchback.SelfEvaluation (LiveRuntime sets it)
        self._last_request_at = float("-inf")  # when the latest client request started
        # (tenant, last hash of an executed action's prefix) -> (engine prompt tokens, already cached,
        # remaining LRU life in shadow tokens, shadow inserted tokens then): the yield counterfactual
        self._yield_info: OrderedDict[tuple[str, int], tuple[int, int, float | None, int]] = OrderedDict()
        self.counts = {
            "requests": 0,
            "observed": 0,
            "skipped": 0,
            "warmup_requests": 0,
            "responses": 0,
            "errors": 0,
            "prompt_tokens": 0,
            "cached_tokens": 0,
            "converted_tokens": 0,
            "deferred_observe_us": 0,
            "rewritten": 0,
            "rejected": 0,
            "not_allowed": 0,
            "body_too_large": 0,
            "offloaded": 0,
            "offload_full": 0,
        }
        self.limits = ObserveLimits()
        self.offload = ParseOffload(self.limits.offload_queue)
        self.tap_budget = TapBudget()
        self.allowed_auth: frozenset[str] = frozenset()  # sha256 hex of allowed auth headers; empty = all
        self._drops_seen: dict[str, int] = {}

    # -- load -------------------------------------------------------------------------------------
    @property
    def inflight(self) -> int:
        return len(self._inflight)

    def load(self) -> EngineLoad:
        """What the planner weighs actions against: client requests in flight, those still waiting
        for their first token (a warm now would queue in front of them), the running set's
        distinct tokens, the engine's queue and prefill utilisation."""
        now = self.clock()
        prefilling = sum(1 for rid, st in self._states.items() if self._prefilling(rid, st, now))
        return EngineLoad(
            inflight=len(self._inflight),
            waiting=int(self.engine_waiting() or 0),
            prefilling=prefilling,
            running_tokens=self.running.tokens,
            utilisation=self.utilisation,
        )

    def _prefilling(self, rid: int, st: _ReqState, now: float) -> bool:
        """Still in prefill: no first streamed token yet; unstreamed (no token to see), while its
        uncached tokens at the measured prefill rate are not done."""
        tap = st.tap
        if tap is not None and tap.first_token_at is not None:
            return False
        if tap is not None and tap.stream:
            return True
        view, obs = st.view, st.observed
        if view is None or obs is None:
            return True  # not observed yet: just arrived
        rate = self.policy.config.prefill_tokens_per_s
        todo = max(0, view.total_tokens - int(obs.resident_tokens or 0))
        return now < self._inflight.get(rid, now) + todo / max(1.0, rate)

    # -- hooks (request path) ------------------------------------------------------------------------
    def on_request(self, ctx: Any) -> None:
        self._inflight[ctx.request_id] = ctx.started
        self._last_request_at = ctx.started
        st = _ReqState()
        self._states[ctx.request_id] = st
        st.alone = len(self._inflight) == 1 and not getattr(self.executor, "sending", 0)
        ctx.state["cachescout"] = st
        self.counts["requests"] += 1
        if ctx.path not in OBSERVED_PATHS or ctx.method != "POST":
            st.skip = True
            return
        if self.allowed_auth and not self._allowed(ctx.headers):
            self._skip(st, "not_allowed")
            return
        size = ctx.body_size if getattr(ctx, "body_size", -1) >= 0 else len(ctx.body)
        if size > self.limits.max_body_bytes:
            self._skip(st, "body_too_large")
            return
        if ctx.headers.get(WARMUP_HEADER):
            self.counts["warmup_requests"] += 1
        if isinstance(ctx.json, dict):
            self._later(self._build_view, ctx, st)
        elif ctx.json is None and size > self.limits.inline_parse_bytes and ctx.body[:1] in b"{ \t\r\n":
            st.parsing = True  # the forwarder left it unparsed: too large for the loop
            args = (ctx.path, ctx.body, ctx.headers, self.block_chars, self.chars_per_token)
            if self.offload.submit(view_from_openai_bytes, args, lambda f: self._view_ready(ctx, st, f)):
                self.counts["offloaded"] += 1
            else:
                st.parsing = False
                self._skip(st, "offload_full")
        else:
            st.skip = True

    def _allowed(self, headers: Any) -> bool:
        for name in AUTH_HEADERS:
            value = headers.get(name)
            if value and hashlib.sha256(value.encode("latin-1")).hexdigest() in self.allowed_auth:
                return True
        return False

    def _skip(self, st: _ReqState, reason: str) -> None:
        st.skip = True
        self.counts[reason] += 1
        if self.metrics is not None:
            self.metrics.policy_skipped_total.labels(reason).inc()

    def rewrite_body(self, ctx: Any) -> bytes | None:
        """Opt-in: the forwarded body plus the adapter's engine hints for this request's agent
        (`priority` from the survival the planner last gave its anchor, or a `kv_hints` envelope).
        None (forward the original bytes) when off, unparsed, unknown agent or nothing to add. Builds
        the view now (the deferred observation reuses it), so enabling hints costs ~0.3 ms inline."""
        if not self.rewrite_enabled or (self.selfeval is not None and not self.selfeval.active()):
            # off, or observe-only (no engine hints from the policy): only hint-field stripping remains
            return self._stripped(ctx) if self.strip_hint_fields else None
        st = ctx.state.get("cachescout")
        if st is None or st.skip or st.parsing or not isinstance(ctx.json, dict):
            return self._stripped(ctx) if self.strip_hint_fields else None
        view = view_from_openai(
            ctx.path, ctx.json, ctx.headers, block_chars=self.block_chars, chars_per_token=self.chars_per_token
        )
        st.view = view
        if view is None or view.is_warmup or not view.block_hashes:
            return None
        agent = self.policy.agents.lookup(view)
        if agent is None:
            return None
        hit = self._anchor_priority.get(agent.agent_id)
        now = self.clock()
        survival = hit[0] / 100.0 if hit is not None and now - hit[1] < HINT_TTL_S else None
        extras = self.extras_for(survival)
        if not extras:
            return self._stripped(ctx) if self.strip_hint_fields else None
        self.counts["rewritten"] += 1
        body = (strip_fields(ctx.json) if self.strip_hint_fields else None) or ctx.json
        return json.dumps({**body, **extras}, separators=(",", ":"), ensure_ascii=False).encode()

    def _stripped(self, ctx: Any) -> bytes | None:
        """Opt-in (`hints_strip_fields`): the body without the engines' hint-proposal fields, for
        engines that reject unknown fields; None (original bytes) when it carries none."""
        if ctx.method != "POST" or not isinstance(ctx.json, dict):
            return None
        body = strip_fields(ctx.json)
        if body is None:
            return None
        self.counts["stripped"] = self.counts.get("stripped", 0) + 1
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    def on_response_start(self, ctx: Any, status: int, headers: Any, now: float) -> None:
        st = ctx.state.get("cachescout")
        if st is None or st.skip:
            return
        st.status = status
        if 200 <= status < 300:
            st.accepted = True
            if status == 200:
                st.tap = ResponseTap("text/event-stream" in headers.get("content-type", ""), self.tap_budget)
            self._later(self._maybe_observe, ctx, st)
        else:
            self._skip(st, "rejected")  # the engine refused it (auth, validation, overload): learn nothing

    def on_response_chunk(self, ctx: Any, chunk: bytes, now: float) -> None:
        st = ctx.state.get("cachescout")
        if st is not None and st.tap is not None:
            st.tap.feed(chunk, now)

    def on_response_end(self, ctx: Any, error: str | None, now: float) -> None:
        self._inflight.pop(ctx.request_id, None)
        self._states.pop(ctx.request_id, None)
        st = ctx.state.get("cachescout")
        if st is None:
            return
        if st.skip:
            if st.tap is not None:
                st.tap.close()
            return
        st.end = (error, now)
        self._later(self._end_response, ctx, st)

    # -- deferred work ------------------------------------------------------------------------------
    def _later(self, fn: Callable, *args: Any) -> None:
        if self.defer:
            try:
                asyncio.get_running_loop().call_soon(self._deferred_run, fn, *args)
                self.deferred += 1
                return
            except RuntimeError:
                pass
        self._guard(fn, *args)

    def _deferred_run(self, fn: Callable, *args: Any) -> None:
        self.deferred -= 1
        self._guard(fn, *args)

    @property
    def settled(self) -> bool:
        """No client request in flight and every response observed (counters are final)."""
        return not self._inflight and self.deferred == 0 and self.offload.pending == 0

    def _guard(self, fn: Callable, *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            self.counts["errors"] += 1
            if self.metrics is not None:
                self.metrics.policy_errors_total.inc()
            log.debug("policy step %s failed", getattr(fn, "__name__", fn), exc_info=True)
            if self.counts["errors"] == 1:
                log.exception("policy step failed (counted in cachescout_policy_errors_total)")

    def _build_view(self, ctx: Any, st: _ReqState) -> None:
        if st.view is None:  # (rewrite_body may have built it already)
            st.view = view_from_openai(
                ctx.path, ctx.json, ctx.headers, block_chars=self.block_chars, chars_per_token=self.chars_per_token
            )
        if st.view is None:
            st.skip = True
            self.counts["skipped"] += 1
            return
        self._maybe_observe(ctx, st)

    def _view_ready(self, ctx: Any, st: _ReqState, fut: Any) -> None:
        """The worker built (or failed to build) a large body's view; back on the loop."""
        st.parsing = False
        view = None if fut.cancelled() or fut.exception() is not None else fut.result()
        if view is None:
            st.skip = True
            self.counts["skipped"] += 1
            return
        st.view = view
        self._guard(self._maybe_observe, ctx, st)

    def _maybe_observe(self, ctx: Any, st: _ReqState) -> None:
        """Observe once the view is built and the engine accepted the request (either order); a
        response that already ended is observed right after."""
        if st.skip or st.view is None or not st.accepted or st.observed is not None:
            return
        self._observe_request(ctx, st)
        if st.end is not None:
            self._observe_response(ctx, st, *st.end)

    def _end_response(self, ctx: Any, st: _ReqState) -> None:
        if st.observed is not None:
            self._observe_response(ctx, st, *st.end)
        elif not st.parsing and st.tap is not None:  # never observed (skipped): free the tap
            st.tap.close()

    def _observe_request(self, ctx: Any, st: _ReqState) -> None:
        t0 = self.clock()
        view = st.view
        # the session keeps the context as the body bytes (shared with the forwarder), not parsed JSON
        kept = (
            BodyPayload(ctx.path, ctx.body)
            if view.context_payload is not None and isinstance(ctx.body, bytes)
            else None
        )
        st.observed = self.policy.observe_request(view, ctx.started, kept)
        if not view.is_warmup and ctx.request_id in self._states:
            self.running.add(view.block_hashes, view.block_tokens)
            st.held = True
        self.counts["observed"] += 1
        hints = self.hints
        if hints is not None and not view.is_warmup:
            st.hints = request_hints(ctx.json if isinstance(ctx.json, dict) else {}, ctx.headers)
            hints.on_request(
                st.hints, ctx.headers, view.tenant, st.observed.session_id, st.observed.agent_id, ctx.started
            )
        if self.metrics is not None:
            if st.observed.predicted is not None:
                self.metrics.prediction_total.labels("hit" if st.observed.predicted else "miss").inc()
            if not view.is_warmup:
                self.metrics.predicted_cached_tokens_total.inc(max(0, int(st.observed.resident_tokens or 0)))
        self.plan(self.clock())
        spent = self.clock() - t0
        self.counts["deferred_observe_us"] += int(1e6 * spent)
        if self.metrics is not None:  # the forwarder does not time hooks; observe+plan is recorded here
            self.metrics.policy_observe_seconds.observe(spent)

    def _observe_response(self, ctx: Any, st: _ReqState, error: str | None, now: float) -> None:
        if st.held and st.view is not None:
            st.held = False
            self.running.remove(st.view.block_hashes)
        if st.observed is None or st.view is None or st.done:
            return
        st.done = True
        tap = st.tap
        self.counts["responses"] += 1
        if tap is None or error is not None:
            if tap is not None:
                tap.close()
            outcome = ResponseOutcome(finish_reason=None)
        else:
            tap.finish()
            outcome = ResponseOutcome(
                finish_reason=tap.finish_reason,
                prompt_tokens=tap.prompt_tokens,
                cached_tokens=tap.cached_tokens,
                output_tokens=tap.output_tokens,
                assistant_payload=tap.assistant_message() if tap.finish_reason == "tool_calls" else None,
            )
            if not st.view.is_warmup and self.selfeval is not None:  # switchback: client-visible timing
                first = tap.first_token_at if tap.first_token_at is not None else now
                self.selfeval.record_outcome(
                    ctx.started, first - ctx.started, now - ctx.started, tap.prompt_tokens or 0, tap.cached_tokens or 0
                )
                self._credit_yield(st, tap.prompt_tokens or 0, tap.cached_tokens or 0, now)
            if not st.view.is_warmup and tap.prompt_tokens:
                self._count_usage(st, tap.prompt_tokens, tap.cached_tokens or 0)
                if self.prefill is not None and tap.stream and tap.first_token_at is not None:
                    self.prefill.add_request(
                        tap.prompt_tokens - (tap.cached_tokens or 0), tap.first_token_at - ctx.started, alone=st.alone
                    )
                est = st.view.total_tokens
                if est > 0:  # calibrate the view's token estimate against the engine's tokenizer
                    r = tap.prompt_tokens / est
                    self.token_ratio = r if self.token_ratio is None else 0.95 * self.token_ratio + 0.05 * r
        self.policy.observe_response(st.observed.request_id, outcome, now)
        if st.hints is not None and self.hints is not None:
            self.hints.on_response(st.hints, ctx.headers, st.observed.session_id, outcome.finish_reason, now)
        self.plan(self.clock())

    def _count_usage(self, st: _ReqState, prompt: int, cached: int) -> None:
        """Client usage, and conversion: the core attributes a request to the action that prepared
        its context or anchor (one rule, one window: `conversion_window_s`); it counts as converted
        when the engine confirms the hit (cached >= CONVERSION_SHARE of the action's tokens)."""
        self.counts["prompt_tokens"] += prompt
        self.counts["cached_tokens"] += cached
        if self.metrics is not None:
            self.metrics.prompt_tokens_total.inc(prompt)
            self.metrics.cached_prompt_tokens_total.inc(cached)
        obs = st.observed
        reason = getattr(obs, "acted_reason", None)
        if not reason or cached <= 0:
            return
        tokens = int(obs.acted_tokens * (self.token_ratio or 1.0))  # view -> engine tokens
        if cached >= CONVERSION_SHARE * min(tokens, prompt):
            self.counts["converted_tokens"] += tokens
            if self.metrics is not None:
                self.metrics.converted_tokens_total.labels(reason).inc(tokens)

    # -- planning and results -----------------------------------------------------------------------
    def plan(self, now: float) -> int:
        """Ask the core for actions and queue them; called after each observation and on a timer."""
        if self.executor is None:
            return 0
        for rid, started in list(self._inflight.items()):
            if now - started > STALE_INFLIGHT_S:  # a hook that never ended must not pause actions forever
                del self._inflight[rid]
                st = self._states.pop(rid, None)
                if st is not None and st.held and st.view is not None:
                    st.held = False
                    self.running.remove(st.view.block_hashes)
        actions = self.policy.plan(now, self.load())
        return self.executor.submit(actions) if actions else 0

    def on_action_result(self, action: Any, result: WarmResult, now: float) -> None:
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
    def note_action(self, action: Any, result: WarmResult, now: float) -> None:
        """An executed action, before the core marks its blocks fresh (LiveRuntime calls this just
        before `on_action_result`): charge its signal what the engine prefilled for it, and keep what
        the yield counterfactual needs — what was already cached, and how long the shadow gave that
        part to live."""
        if self.selfeval is None or not result.ok or not action.block_hashes:
            return
        res = self.policy.residency
        resident, full, near = res.verdict(action.block_hashes)
        if resident and not full:
            near = res.near_eviction(action.block_hashes[:resident])
        life = remaining_life(res.capacity_tokens, res.zone_tokens(), near)
        # no usage reported (some adapters): charge a warm its whole prefix, a touch nothing
        spent = result.computed_tokens if result.prompt_tokens else (action.tokens if action.kind == "warm" else 0)
        # contended: client requests in flight now, or one arrived since the action was planned
        contended = bool(self._inflight) or self._last_request_at >= action.created
        self.selfeval.record_spent(action.reason, spent, contended, now)
        if action.kind == "retain":
            return
        key = (action.tenant, action.block_hashes[-1])
        self._yield_info[key] = (
            int(result.prompt_tokens or 0),
            int(result.cached_tokens or 0),
            life,
            res.inserted_tokens,
        )
        self._yield_info.move_to_end(key)
        while len(self._yield_info) > MAX_ACTED:
            self._yield_info.popitem(last=False)

    def _credit_yield(self, st: _ReqState, prompt: int, cached: int, now: float) -> None:
        """A client request the core attributed to an executed action (its context or anchor, within
        `conversion_window_s`): when the engine confirms the hit, credit the signal what the hit saved
        beyond the no-action counterfactual (core/yield_ledger.py)."""
        obs, view = st.observed, st.view
        reason = getattr(obs, "acted_reason", None)
        h = getattr(obs, "acted_hash", None)
        if not reason or h is None or view is None or cached <= 0:
            return
        info = self._yield_info.pop((view.tenant, h), None)
        if info is None:
            return
        tokens, pre_cached, life, inserted_at = info
        tokens = tokens or int(obs.acted_tokens * (self.token_ratio or 1.0))
        if cached < CONVERSION_SHARE * min(tokens, prompt):
            return
        cf = counterfactual_cached(pre_cached, life, inserted_at, self.policy.residency.inserted_tokens)
        self.selfeval.record_saved(reason, max(0, min(cached, tokens) - cf), now)

    def update_gauges(self) -> None:
        if self.metrics is None:
            return
        _memory_metrics(self)
        if self.hints is not None:
            self.hints.update_gauges()
        # The core caches R between refreshes; asking before any transitions were learned would pin
        # R at 0 for the next refresh window, so gauges start once the gate could first open.
        if getattr(self.policy, "requests", 0) <= getattr(self.policy.config, "r_min_transitions", 0):
            return
        s = self.policy.stats()
        self.metrics.predictability_ratio.set(float(s.predictability))
        self.metrics.agents.set(s.agents)
        self.metrics.sessions.set(s.sessions)


def view_from_openai_bytes(
    path: str, body: bytes, headers: Any, block_chars: int, chars_per_token: float
) -> RequestView | None:
    """The worker thread's job: parse a large body and build its view (None when not a chat/completions body)."""
    return view_from_openai(path, body, headers, block_chars=block_chars, chars_per_token=chars_per_token)


def _memory_metrics(observer: LivePolicyObserver) -> None:
    """Byte budgets -> metrics: drops since the last tick as counter increments, kept bytes as gauges."""
    m, policy = observer.metrics, observer.policy
    sessions = getattr(policy, "sessions", None)
    now = {
        "sessions": getattr(sessions, "dropped_for_bytes", 0),
        "fanout": getattr(policy, "fanout_dropped", 0),
        "tap": observer.tap_budget.overflows,
    }
    seen = observer._drops_seen
    for store, n in now.items():
        if n > seen.get(store, 0):
            m.memory_drops_total.labels(store).inc(n - seen.get(store, 0))
        seen[store] = n
    m.kept_bytes.labels("sessions").set(getattr(sessions, "bytes", 0))
    m.kept_bytes.labels("tap").set(observer.tap_budget.used)
