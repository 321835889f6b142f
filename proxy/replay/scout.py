"""The CacheScout proxy policies in the replay: the product (`scout-proxy`) and its engine variants.

- `scout-proxy`: the live proxy's planner, unchanged (`proxy.core.ScoutPolicy`), in front of a stock
  LRU `SimEngine`. Each request is observed (`observe_request`) as it arrives, each response end is
  observed with its finish reason, and after every event and on the live runtime's timer
  (`policy_plan_interval`, 0.25 s) the planner is asked for actions (`plan`), which go through the
  live executor's rules (`engine_side.ReplayExecutor`) to the engine: a touch or warm is a
  `max_tokens=1` engine request on the action's blocks, queued and scheduled with the client
  requests; the core hears back when the engine finished it. A retain is a priority bump that an
  LRU engine cannot honour.
- `scout-proxy-priority`: the same planner (with Retain hints on) against a priority-eviction
  engine (SGLang `--radix-eviction-policy priority`): actions carry their priority into the pool.
- `scout-engine` (the paper's in-engine eviction, fed by the same core): `scout_engine.py`.
"""

from __future__ import annotations

import dataclasses
import math

from proxy.core import config as core_config
from proxy.core.actions import Action, ObservedRequest
from proxy.core.economics import RunningSet
from proxy.core.policy import ScoutPolicy
from proxy.core.view import EngineLoad, ResponseOutcome, view_from_blocks
from proxy.core.yield_book import YieldBook
from proxy.engines.base import LANE_LOWEST
from proxy.replay.engine_side import ReplayExecutor
from proxy.replay.policies import ReplayPolicy
from proxy.runtime.policy_config import executor_limits, policy_config
from proxy.runtime.switchback import SelfEvaluation, switchback_config, yield_config
from proxy.settings import Settings

SIM_PAYLOAD = "sim"


def default_settings(overrides: dict | None = None) -> Settings:
    """The proxy's Settings at their defaults (no environment read) plus PolicyConfig overrides."""
    return Settings.model_construct(policy_overrides=dict(overrides or {}))


def build_config(
    capacity_blocks: int,
    block_size: int,
    settings: Settings | None = None,
    retain: bool = False,
    prefill_tokens_per_s: float | None = None,
    reload: tuple[float, float] | None = None,
    host_tier_blocks: int = 0,
) -> core_config.PolicyConfig:
    """The planner's config for a replay: the live proxy's builder (`policy_config`), given the
    engine truth the live proxy would learn: the cache's capacity, the prefill rate and, with a
    host tier, its size and reload price (tokens/s, latency s)."""
    return policy_config(
        settings if settings is not None else default_settings(),
        capacity_tokens=int(capacity_blocks) * int(block_size),
        prefill_tokens_per_s=prefill_tokens_per_s,
        retain=retain,
        reload=reload,
        host_tier_tokens=int(host_tier_blocks) * int(block_size) if host_tier_blocks else None,
    )


class _ScoutBase(ReplayPolicy):
    retention_s: float = 300.0  # priority engine's retention; make_policy sets the run's value
    # built by each subclass's setup():
    sp: ScoutPolicy
    _rid: dict[int, int]  # replay request index -> the core's request id, while in flight
    inflight: int

    def __init__(
        self,
        overrides: dict | None = None,
        use_sessions: bool = True,
        block_size: int = 16,
        settings: Settings | None = None,
    ):
        self.settings = settings if settings is not None else default_settings(overrides)
        self.use_sessions = use_sessions
        self.block_size = block_size

    def _view(self, req):
        return view_from_blocks(
            req.tenant,
            req.block_hashes,
            req.block_tokens,
            anchor_blocks=req.anchor_blocks,
            header_blocks=req.header_blocks,
            session_id=req.session_id if self.use_sessions else None,
            model=req.model,
            # the simulated engine rebuilds prompts from block ids: any payload will do,
            # but the planner only acts on anchors/contexts that have one
            anchor_payload=req.anchor_payload if req.anchor_payload is not None else SIM_PAYLOAD,
            context_payload=SIM_PAYLOAD,
        )

    def _observe_response(self, i, req, hit_blocks, now):
        rid = self._rid.pop(i, None)
        self.inflight = max(0, self.inflight - 1)
        if rid is None:
            return
        cached = sum(req.block_tokens[:hit_blocks])
        self.sp.observe_response(
            rid,
            ResponseOutcome(
                finish_reason=req.finish_reason or "stop",
                prompt_tokens=req.prompt_tokens,
                cached_tokens=cached,
                output_tokens=req.output_tokens,
            ),
            now,
        )

    def extra(self):
        st = self.sp.stats()
        return {
            "predictability": round(st.predictability, 4),
            "agents": st.agents,
            "top1_accuracy": round(st.top1_accuracy, 4),
            "predictions": st.predictions,
            "actions_emitted": dict(st.actions_emitted),
            # why the planner did not act, most frequent first (decisions.SKIP_REASONS; issue 26 item 2)
            "top_skips": top_skips(self.sp.planner.skipped),
        }


def top_skips(skipped: dict[str, int], n: int = 5) -> dict[str, int]:
    """The `n` most frequent skip reasons with a non-zero count, most frequent first."""
    return dict(sorted(((k, v) for k, v in skipped.items() if v), key=lambda kv: (-kv[1], kv[0]))[:n])


class ScoutProxyPolicy(_ScoutBase):
    name = "scout-proxy"
    eviction = "lru"
    scheduling = "fcfs"  # the engine's scheduling policy (EngineConfig.scheduling_policy)
    lane = False  # the slack lane (ScoutProxyLanePolicy)

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        prio = self.eviction == "priority"
        engines = getattr(rec, "engines", 1)
        reload, host = None, 0
        cpu = self.driver.engine.config.cpu_blocks
        if cpu:  # the engine has a host tier: reloads are loads
            reload = (1.0 / cost.transfer_s(1), cost.offload_latency_s)
            host = cpu
        self.sp = ScoutPolicy(
            build_config(
                capacity_blocks,
                self.block_size,
                self.settings,
                retain=prio,
                prefill_tokens_per_s=engines / cost.prefill_token_s,
                reload=reload,
                host_tier_blocks=host,
            )
        )
        self.executor = ReplayExecutor(executor_limits(self.settings), self._execute, self.sp.record_action_result)
        # the live yield ledger (throttles a signal whose realised yield is negative), fed by the same
        # rule as live (core/yield_book.py); the switchback's control windows are live-only (the
        # replay evaluates the policy itself), so the experiment is pinned on
        self._now = 0.0  # the latest event or tick
        self.tick_s = float(self.settings.policy_plan_interval)
        self.selfeval = SelfEvaluation(
            dataclasses.replace(switchback_config(self.settings), mode="on"),
            yield_config(self.settings),
            None,
            lambda: self._now,
        )
        self.sp.planner.action_gate = self.selfeval.gate
        self.book = YieldBook()
        self._next = 0  # arrival-order index of the next request not yet arrived
        self._rid: dict[int, int] = {}
        self._obs: dict[int, ObservedRequest] = {}  # request -> its observation, until the engine schedules it
        self._running = RunningSet()  # distinct tokens of the requests in flight
        self.inflight = 0
        self.executed = 0
        self._pumping = False

    def on_request(self, i, req, now):
        k = self.driver.arrived  # this arrival's place in arrival order (open loop: `i`)
        self._next = k  # an action pumped now runs alongside this arrival
        self._pump(now)
        self._now = now
        obs = self.sp.observe_request(self._view(req), now)
        self._rid[i] = obs.request_id
        self.inflight += 1
        self._next = k + 1
        self._running.add(req.block_hashes, req.block_tokens)
        if obs.acted_reason and obs.acted_hash is not None:
            self._obs[i] = obs
        self._plan(now)

    def on_admit(self, i, req, hit_blocks, now):
        obs = self._obs.pop(i, None)
        if obs is None or obs.acted_hash is None or obs.acted_reason is None:
            return
        saved = self.book.credit(
            req.tenant,
            obs.acted_hash,
            obs.acted_tokens,
            req.prompt_tokens,
            sum(req.block_tokens[:hit_blocks]),
            self.sp.residency,
        )
        if saved is not None:
            self.selfeval.record_saved(obs.acted_reason, saved, now)

    def on_response(self, i, req, hit_blocks, now):
        self._now = max(self._now, now)
        self._running.remove(req.block_hashes)
        self._observe_response(i, req, hit_blocks, now)
        self._pump(now)
        self._plan(now)

    def next_wakeup(self) -> float:
        """The next plan tick. Live, the planner runs on every request and response *and* on a
        timer (`LiveRuntime._tick_loop`, every `policy_plan_interval`): a tool pause's wake or the
        session sweep that falls due in a quiet stretch is served at the next tick, not at the next
        request. Without the timer the replay left exactly the quiet stretches (where a warm has
        slack) unplanned: the demo's replay cell read -13% mean TTFT for scout-proxy (median of 5
        seeds), -21% with it (docs/results/replay-ticks.md). Ticks run while requests are to come or the
        engine has work."""
        d = self.driver
        if d.arrived >= d.n and not d.engine.has_work:
            return math.inf
        return (math.floor(self._now / self.tick_s) + 1) * self.tick_s

    def wakeup(self, now: float) -> None:
        self._now = max(self._now, now)
        self._pump(now)
        self._plan(now)

    def _pump(self, now: float) -> None:
        if self._pumping:
            return
        self._pumping = True
        try:
            # the slack lane: the engine keeps actions behind its own queue, so its length is no
            # reason to wait (as LiveRuntime's executor load)
            self.executor.pump(now, self.inflight, 0 if self.lane else self.driver.waiting())
        finally:
            self._pumping = False

    def _load(self, now: float) -> EngineLoad:
        d = self.driver
        if self.lane:
            return EngineLoad(
                inflight=self.inflight,
                waiting=d.waiting(),
                prefilling=d.prefilling(),
                decoding=d.decoding(),
                running_tokens=self._running.tokens,
                utilisation=d.utilisation(now),
                priority_lane=True,
            )
        return EngineLoad(
            inflight=self.inflight,
            waiting=d.waiting(),
            prefilling=d.prefilling(),
            decoding=d.decoding(),
            running_tokens=self._running.tokens,
            utilisation=d.utilisation(now),
        )

    def _plan(self, now: float) -> None:
        actions = self.sp.plan(now, self._load(now))
        if actions:
            self.executor.submit(actions, now)
            self._pump(now)

    def _execute(self, a: Action, now: float) -> bool:
        """Hand an action to the engine (as live, to the engine's queue); the core hears back when
        the engine finished it (`_done`)."""
        toks = self._tokens_of(a)
        contended_now = self.inflight > 0
        nxt = self._next

        def done(ok: bool, end: float, cached: int, computed: int) -> None:
            self.executed += ok
            if ok and a.kind != "retain":  # yield: charged before the core's shadow marks the blocks
                # fresh (at the report), as live
                spent = self.book.charge(a, self.sp.residency, sum(toks), min(cached, sum(toks)), computed)
                # contended: a client request overlapped the action's run — in flight when it started,
                # or arriving before it ended (live: yield_book.ran_alongside_traffic)
                contended = contended_now or self._arrival(nxt) <= end
                self.selfeval.record_spent(a.reason, spent, contended, end)
            self.executor.complete(a, ok, end, computed)
            self._pump(end)

        prio = LANE_LOWEST if self.lane and a.kind != "retain" else a.priority  # vLLM adapter's warm_fields
        return self.driver.submit_action(a.kind, a.reason, a.block_hashes, a.tokens, now, prio, done)

    def _arrival(self, k: int) -> float:
        """When the `k`-th client request (in arrival order) arrives."""
        return self.driver.arrival_time(k)

    def _tokens_of(self, a) -> tuple[int, ...]:
        """Per-block tokens of an action's chain (the action only carries the total)."""
        n = len(a.block_hashes)
        if n == 0:
            return ()
        base, rest = divmod(int(a.tokens), n)
        return tuple(base + (1 if j < rest else 0) for j in range(n))

    def extra(self):
        out = super().extra()
        st = self.executor.stats
        ledger = self.selfeval.ledger.snapshot(self._now)
        out.update(
            {
                "executed": self.executed,
                "dropped_stale": st["dropped_stale"],
                "dropped_busy": st["dropped_busy"],
                "deduped": st["deduped"],
                "declined": self.sp.planner.declined,
                "overflow_ticks": self.sp.planner.overflow_ticks,
                "held_back": {r: y.held_back for r, y in ledger.items() if y.held_back},
                "throttled": sorted(r for r, y in ledger.items() if y.throttled),
            }
        )
        return out


class ScoutProxyPriorityPolicy(ScoutProxyPolicy):
    name = "scout-proxy-priority"
    eviction = "priority"


class ScoutProxyLanePolicy(ScoutProxyPolicy):
    """The slack lane (issue 24; `lanes.py`): the same planner in front of a vLLM engine under
    `--scheduling-policy priority`; every touch and warm at the lowest priority (`LANE_LOWEST`: never
    admitted ahead of a queued client request, the first preempted), the planner told
    (`EngineLoad.priority_lane`: it no longer stands back for requests it does not see; it still
    waits for the engine's queue and prices as on FCFS, which measured better on the grid)."""

    name = "scout-proxy-lane"
    scheduling = "priority"
    lane = True
