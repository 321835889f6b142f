"""Planner: turns predictions, residency and budgets into Touch / Warm / Retain actions.

Event-driven so plan() stays O(changed sessions): requests and/or responses mark their session
dirty (``plan_trigger``; a response ending in ``tool_calls`` always does); plan() looks only at
dirty sessions' predicted successors (reason ``transition`` for the top-1, ``fanout`` for further
successors with P >= τ) and at sessions paused on ``tool_calls`` (reason ``tool_resume``), plus,
at most every ``sweep_interval_s``, the survival-ranked anchors of all live sessions (reason
``hint``: protective touches and, when enabled, retention hints) and the recent sessions paused
on ``tool_calls`` whose pauses are not learned yet (reason ``tool_resume``), and the parents of
fan-outs the policy detected (concurrent requests of one session sharing a prefix beyond the
anchor, or n > 1; reason ``fanout``, touch/retain only).

What each candidate becomes follows the residency shadow: fully resident and near the LRU tail ->
Touch; resident but safe -> nothing (or Retain for a hint); (partly) evicted -> Warm, when the
economics finds it worth its cost (it prices the lead time and the chance the warm is still
cached at the demand). Retain and engine
priorities go to agent anchors only unless ``retain_sessions``: an engine keeps a priority for its
retention time, far longer than one session's pause. Budgets: a token bucket sized from the
engine's prefill rate by default (warm = missing tokens, touch = ``touch_cost_tokens``), no warm
while the engine has a queue, ``max_concurrent`` unanswered actions,
``max_actions_per_tick``, no actions while the engine queue is long, one action per anchor per
cool-down. Every action but tool_resume and fan-out parents needs the tenant's gate R >= R_min;
with a shut gate the planner does nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from .actions import TOUCH, Action
from .agents import AgentRegistry, TenantState
from .candidates import FanoutParent, Recorder, RuntimeHints
from .config import PRUNE_SLACK, PolicyConfig
from .decisions import DecisionLog
from .economics import Market
from .lineages import LineageBook
from .plan_filters import Gate, Look, Resident
from .plan_picker import ActionGate, Picker, Spend
from .plan_piece import TICK
from .plan_registry import SKIP_PAIRS, SKIP_REASONS, STAGE_OF, Enabled, Pipeline, resolve
from .plan_sources import SessionLoop
from .plan_tick import Tick
from .residency import ResidencyShadow
from .sessions import SessionTracker
from .view import EngineLoad

TOUCH_EWMA = 0.2  # weight of one measured touch in the touch-prefill estimate (~5 touches of memory)
DIRTY_SLACK = 2  # dirty sessions kept across busy ticks before dead ones are filtered out (x max_sessions)


class Planner:
    """The pipeline's owner: its state (sessions that changed, parked fan-out parents), its pieces
    (``pipeline``: one instance of each registered piece), and its collaborators, each explicit:
    the ``Recorder`` (counts and the decision ring), the ``Spend`` (bucket, in-flight actions,
    last-acted times) and the ``Picker`` (filters, pricer, picker, vetoes)."""

    def __init__(
        self, config: PolicyConfig, registry: AgentRegistry, sessions: SessionTracker, residency: ResidencyShadow
    ) -> None:
        self.cfg = config
        self.registry = registry
        self.sessions = sessions
        self.residency = residency
        self.host_residency: ResidencyShadow | None = None  # the engine's host tier, when it has one
        self.dirty: dict[tuple[str, str], None] = {}
        # session -> (agent, parent hashes, their block tokens, payload)
        self.fanout: dict[tuple[str, str], FanoutParent] = {}
        self._refilled: float | None = None
        self._last_sweep = float("-inf")
        self._now: float | None = None
        self._budget_cfg: PolicyConfig | None = None
        self._budget = (0.0, 0.0)
        self.failed = 0
        self.touch_prefill = float(config.touch_cost_tokens)  # measured tokens a touch prefills (EWMA)
        self.overflow_ticks = 0  # plan() calls skipped: the running set overflows the cache
        self._overflow_until = float("-inf")  # ... or did within the last cache lifetime
        self.hints: RuntimeHints | None = None  # runtime hints (core.hint_actions.HintDriver): a source
        self.lineages: LineageBook | None = None  # text views' lineages (ScoutPolicy feeds them)
        # the registered pieces (plan_registry.PIECES), one instance each; those a source asks by name
        self.pipeline = Pipeline.build()
        self.gates = cast(Gate, self.pipeline.pieces[Gate.name])
        self.resident = cast(Resident, self.pipeline.pieces[Resident.name])
        self._action_gate = cast(ActionGate, self.pipeline.pieces[ActionGate.name])
        # why candidates (or whole ticks) produced no action, by skip reason and by deciding piece:
        # fixed sets of keys (plan_registry), so /debug/state and /metrics say why
        self.rec = Recorder(SKIP_REASONS, SKIP_PAIRS, STAGE_OF, self.gates.r)
        self.spend = Spend(bucket=config.warm_budget()[1])
        self.picker = Picker(self.rec, self.spend)
        self._loop = SessionLoop()
        self._pieces_cfg: PolicyConfig | None = None  # the config _on was read from
        self._on: Enabled = self._pieces()  # the pieces this config leaves on (disabled_pieces)

    # --- the collaborators' state, by its old names -------------------------------------------------
    @property
    def skipped(self) -> dict[str, int]:
        return self.rec.skipped

    @property
    def decisions(self) -> DecisionLog:
        return self.rec.decisions

    @property
    def bucket(self) -> float:
        return self.spend.bucket

    @bucket.setter
    def bucket(self, v: float) -> None:
        self.spend.bucket = v

    @property
    def inflight(self) -> dict[tuple[str, float], tuple[float, tuple[int, ...]]]:
        return self.spend.inflight

    @property
    def last_acted(self) -> dict[str, float]:
        return self.spend.last_acted

    @property
    def emitted(self) -> dict[str, int]:
        return self.spend.emitted

    @property
    def declined(self) -> int:
        return self.spend.declined

    @property
    def action_gate(self) -> Callable[[str, str, float], bool] | None:
        """The one outside veto (runtime wiring): (reason, kind, now) -> may this action be
        emitted? Observe-only windows and throttled signals (core/yield_ledger.py) answer False."""
        return self._action_gate.hook

    @action_gate.setter
    def action_gate(self, hook: Callable[[str, str, float], bool] | None) -> None:
        self._action_gate.hook = hook

    # --- pieces -------------------------------------------------------------------------------------
    def _pieces(self) -> Enabled:
        """The pieces the current config leaves on (cfg may be swapped: re-read when it is)."""
        if self._pieces_cfg is not self.cfg:
            self._pieces_cfg = self.cfg
            cfg = self.cfg
            self._on = self.pipeline.enabled(resolve(cfg.disabled_pieces, cfg.piece_params), cfg.piece_params, cfg)
        return self._on

    def enabled(self, piece: str) -> bool:
        """Is the piece (its registry name) switched on in the current config?"""
        return piece not in self._pieces().off

    def tick(self, now: float, sweep_due: bool = False, calm: bool = True) -> Tick:
        """What the sources see of one tick (plan_tick.Tick)."""
        return Tick(
            now,
            self.cfg,
            self.registry,
            self.sessions,
            self.residency,
            self.dirty,
            self.fanout,
            self.hints,
            self.lineages,
            self._pieces().off,
            self.rec,
            self.gates,
            self.resident,
            self.spend.last_acted,
            sweep_due,
            calm,
        )

    # --- gate ------------------------------------------------------------------------------------
    def gate_r(self, ts: TenantState, now: float | None = None) -> float | None:
        """The gate's R; None while too few transitions are learned (a shut gate)."""
        return Gate.r_of(ts, self.cfg, now)

    def gate_open(self, ts: TenantState, now: float | None = None) -> bool:
        r = self.gate_r(ts, now)
        return r is not None and r >= self.cfg.r_min

    # --- budget bookkeeping ----------------------------------------------------------------------
    def _refill(self, now: float) -> None:
        if self._budget_cfg is not self.cfg:  # cfg may be swapped (measured rate)
            self._budget_cfg, self._budget = self.cfg, self.cfg.warm_budget()
        spend = self.spend
        if self._refilled is not None and now > self._refilled:
            rate, burst = self._budget
            spend.bucket = min(burst, spend.bucket + (now - self._refilled) * rate)
        if self._refilled is None or now > self._refilled:
            self._refilled = now
        if spend.inflight:
            grace = self.cfg.action_ttl_s
            for key in [k for k, (deadline, _) in spend.inflight.items() if deadline + grace < now]:
                del spend.inflight[key]  # never answered: stop counting it against concurrency
        if len(spend.last_acted) > PRUNE_SLACK * (self.cfg.max_agents + self.cfg.max_sessions):
            horizon = now - self.cfg.cooldown_s
            spend.last_acted = {k: t for k, t in spend.last_acted.items() if t >= horizon}

    def finish(self, action: Action, ok: bool, computed_tokens: float | None = None) -> tuple[int, ...] | None:
        entry = self.inflight.pop((action.anchor_id, action.created), None)
        if not ok:
            self.failed += 1
        elif action.kind == TOUCH and computed_tokens is not None:
            # a touch of a prefix the shadow holds can still find its tail gone in the engine
            self.touch_prefill += TOUCH_EWMA * (max(0.0, float(computed_tokens)) - self.touch_prefill)
        return entry[1] if entry else None

    # --- planning --------------------------------------------------------------------------------
    def plan(self, now: float, load: EngineLoad) -> list[Action]:
        """One tick: the per-tick gates, then sources -> filters -> pricer -> picker -> vetoes."""
        cfg = self.cfg
        self._now = now
        self._refill(now)
        # requests the proxy does not see (another client on the same engine) make any action a
        # guess: stand back, unless the engine keeps actions behind them (the slack lane). Its queue
        # is a reason to wait in the lane too: measured on the grid, acting while clients queue
        # loses (docs/replay.md "Lanes on the grid")
        queued = load.waiting > cfg.max_engine_waiting
        shared = load.external > 0 and not load.priority_lane
        inflight = self.spend.inflight
        if queued or shared or len(inflight) >= cfg.max_concurrent:
            # per-tick clears run whether or not this tick acts (a queued engine must not grow
            # them): parked fan-out parents are only worth acting on now; dirty sessions are kept
            # for a calmer tick, minus those the tracker already dropped
            self.fanout.clear()
            if len(self.dirty) > DIRTY_SLACK * cfg.max_sessions:  # amortised O(1): refiltered rarely
                live = self.sessions.sessions
                self.dirty = {k: None for k in self.dirty if k in live}
            self.rec.drop(TICK, "tick_engine_shared" if shared and not queued else "tick_engine_busy", now)
            return []
        slots = min(cfg.max_actions_per_tick, cfg.max_concurrent - len(inflight))
        if slots <= 0:
            return []
        if self._overflowing(now, load):  # anything kept now is evicted: observe only
            self.dirty.clear()
            self.fanout.clear()
            self.overflow_ticks += 1
            self.rec.drop(TICK, "tick_overflow", now)
            return []
        self.gates.begin()  # one R-gate verdict per tenant per tick
        on = self._on if self._pieces_cfg is cfg else self._pieces()
        sweep_due = now - self._last_sweep >= cfg.sweep_interval_s
        if sweep_due:
            self._last_sweep = now
        calm = load.prefilling <= 0 and load.waiting <= 0
        tick = Tick(
            now,
            cfg,
            self.registry,
            self.sessions,
            self.residency,
            self.dirty,
            self.fanout,
            self.hints,
            self.lineages,
            on.off,
            self.rec,
            self.gates,
            self.resident,
            self.spend.last_acted,
            sweep_due,
            calm,
        )
        self._loop.collect(tick, on.per_session)
        for src in on.per_tick:
            src.collect(tick)
        if sweep_due:
            for src in on.at_sweep:
                src.collect(tick)
        # a dirty session is planned once; a parked fan-out parent is only worth acting on now
        self.dirty.clear()
        self.fanout.clear()
        cands = tick.out
        if not cands:
            return []
        cands.sort(key=lambda c: c.score, reverse=True)
        busy = 0 < cfg.warm_max_inflight < load.inflight or load.waiting > cfg.warm_max_waiting
        x = Look(cfg, self.residency, self.host_residency, now, busy, self.spend.last_acted)
        actions = self.picker.select(cands, x, on.phases, slots, self.market(load), self.sessions, self.dirty)
        if self.hints is not None and actions:
            self.hints.note(actions)  # a hint pays for one warm
        return actions

    def _overflowing(self, now: float, load: EngineLoad) -> bool:
        """Market.overflowing as a regime: now, or within one cache lifetime (capacity / insert rate,
        <= continuation_horizon_s); what is kept in a dip (a tool pause) the next overflow evicts."""
        cap, rate = self.residency.capacity_tokens, self.residency.insert_rate_at(now)
        if 0 < cap <= load.running_tokens:
            life = min(cap / rate, self.cfg.continuation_horizon_s) if rate and rate > 0 else 0.0
            self._overflow_until = max(self._overflow_until, now + life)
        return cap > 0 and (cap <= load.running_tokens or now < self._overflow_until)

    def market(self, load: EngineLoad) -> Market:
        """The engine as the economics sees it now: the shadow's turnover and tail reuse, the load."""
        cfg, res = self.cfg, self.residency
        return Market(
            capacity_tokens=float(res.capacity_tokens),
            insert_rate=res.insert_rate_at(self._now),
            zone_tokens=res.zone_tokens() if res.capacity_tokens else 0.0,
            tail_reuse=res.rates.tail_reuse,
            prefill_tokens_per_s=cfg.prefill_tokens_per_s,
            request_rate=res.rates.request_rate,  # the traffic's own: `quiet` compares a pause with it
            waiting=load.waiting,
            prefilling=load.prefilling,
            decoding=load.decoding,
            # the price of engine time is what it takes from traffic now: nothing when no client request
            # is in flight or queued (arrivals during the action are priced by `queueing`); the recent
            # busy share otherwise (a scrape window that still holds the burst before a pause)
            utilisation=0.0 if load.inflight == 0 and load.waiting <= 0 and load.external <= 0 else load.utilisation,
            running_tokens=float(load.running_tokens),
            idle_s=None
            if res.last_forward_at is None or self._now is None
            else max(0.0, self._now - res.last_forward_at),
            reload_price=1.0,  # not in the host tier either: recomputed
            touch_cost_tokens=float(cfg.touch_cost_tokens),
            touch_hidden_tokens=max(0.0, self.touch_prefill - cfg.touch_cost_tokens),
            external=load.external,
        )
