"""What each runtime hint does to the planner, and how the traffic checks it afterwards.

The planner asks ``HintDriver.candidates(now)`` for extra candidates on every plan (a hook of a
few lines in ``Planner.plan``); the live observer and the replay call ``observe`` after each
client request so that hints are checked against what really arrived. With no hint ever received
both are one truthiness test: hints add nothing to the request path when absent.

What each kind does (docs/hints.md has the full table, and what checks it):
- ``tool_started``: the session's context becomes an ungated ``tool_resume`` candidate until it
  resumes; a trusted expected duration gives the planner the lead time;
- ``tool_finished``: the same candidate, now imminent;
- ``fanout``: the parent's context becomes a ``fanout`` candidate until the branches arrived;
- ``next_agent``: that agent's anchor becomes an ungated ``transition`` candidate, P = standing x p;
- ``session_ended``: every protective action for the session stops at once (release);
- ``pin`` / ``retain``: operator-listed sources only, kept until the TTL within a cache share.
Each hint pays for at most one warm; touches of what is still cached may repeat.

Agents are named by the runtime (``agent`` in hints, ``X-CacheScout-Agent`` / ``metadata`` on
requests); names are bound to the fingerprinted agent of the requests that carry them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .action_payload import ActionPayload
from .actions import REASON_FANOUT, REASON_HINT, REASON_TOOL_RESUME, REASON_TRANSITION, WARM, Action
from .agents import agent_id_for
from .hint_checks import CheckBook, Watch
from .hints import (
    ACCEPTED,
    FACT,
    FANOUT,
    NEXT_AGENT,
    PIN,
    PREDICTION,
    REFUSED,
    RETAIN,
    SESSION_ENDED,
    TOOL_FINISHED,
    TOOL_STARTED,
    Hint,
    HintCandidate,
    HintConfig,
    TrustBook,
    hint_class,
)

if TYPE_CHECKING:
    from .policy import ScoutPolicy

__all__ = ["Hint", "HintCandidate", "HintDriver"]

MAX_ACTIVE = 512  # sessions with a hint-driven plan at once
MAX_OFFERED = 4 * MAX_ACTIVE  # anchors remembered for attribution: a few per active plan
MAX_NAMES = 1024  # runtime agent names bound to fingerprinted agents
PIN_REFRESH_S = 1.0  # a pin is offered to the planner at most this often


@dataclass(slots=True)
class _Plan:
    kind: str
    source: str
    weight: float  # standing-weighted probability
    expected_at: float | None = None  # trusted predicted arrival (lead time)
    agent_id: str | None = None  # next_agent / pin on an agent
    until: float = float("inf")
    last_offered: float = float("-inf")
    warms_left: int = 1  # a hint pays for one warm; then touch/retain only


class HintDriver:
    def __init__(self, policy: ScoutPolicy, config: HintConfig | None = None) -> None:
        self.policy = policy
        self.cfg = config or HintConfig()
        self.trust = TrustBook(self.cfg)
        self.plans: OrderedDict[tuple[str, str], _Plan] = OrderedDict()  # session key -> plan
        self.pins: OrderedDict[tuple[str, Any], _Plan] = OrderedDict()  # ("s"/"a", key) -> pin
        self.checks = CheckBook(self.trust)  # hints awaiting the traffic that checks them
        self.names: OrderedDict[str, str] = OrderedDict()  # agent name -> agent id
        self.offered: OrderedDict[str, tuple[str, str]] = OrderedDict()  # anchor id -> (kind, source)
        self.last_offered: dict[str, tuple[str, str]] = {}  # ... of the latest plan only
        self._anchor_plan: dict[str, _Plan] = {}  # ... and the plan behind it
        self.released_sessions = 0
        self.released_tokens = 0

    @property
    def watching(self) -> bool:
        """Whether ``observe`` has anything to do for a request without an agent name."""
        return bool(self.checks.watches or self.plans)

    # --- inputs ------------------------------------------------------------------------------------
    def refused(self, hints: Sequence[Hint], source: str) -> list[int]:
        """Indices of directives this source may not give (the edge refuses the whole batch)."""
        allowed = source in self.cfg.directive_sources
        return [i for i, h in enumerate(hints) if hint_class(h.kind) == "directive" and not allowed]

    def submit(self, hints: Sequence[Hint], source: str, now: float) -> list[str]:
        """Admit and apply each hint in order; returns one admission outcome per hint. The first
        hint attaches the driver to the planner (until then planning is exactly hint-less)."""
        if self.policy.planner.hints is not self:
            self.policy.planner.hints = self
        return [self._one(h, source, now) for h in hints]

    def _one(self, h: Hint, source: str, now: float) -> str:
        trust = self.trust
        outcome = trust.admit(source, h.kind, now, h.probability if h.kind == NEXT_AGENT else 1.0)
        if outcome == REFUSED:
            return outcome
        acted = outcome == ACCEPTED
        cfg = self.cfg
        key = self._session_key(h.session_id)
        session = self.policy.sessions.sessions.get(key) if key is not None else None
        ctx_tokens = int(sum(session.block_tokens)) if session is not None else 0
        if h.kind in (TOOL_STARTED, TOOL_FINISHED):
            expected_at = now + h.expected_s if h.kind == TOOL_STARTED and h.expected_s is not None else None
            if h.kind == TOOL_FINISHED:
                self.checks.close_duration(h.session_id, now)
            horizon = max(cfg.resume_horizon_s, 3.0 * (h.expected_s or 0.0))
            self.checks.watch(h.session_id, source, h.kind, FACT, now, now + horizon, ctx_tokens)
            if expected_at is not None:
                self.checks.watch(
                    h.session_id,
                    source,
                    "tool_duration",
                    PREDICTION,
                    now,
                    now + horizon,
                    ctx_tokens,
                    expected_at=expected_at,
                )
            if acted and key is not None:
                trusted = expected_at if trust.weight(source, PREDICTION) >= cfg.prediction_min_p else None
                self._set_plan(key, _Plan(h.kind, source, trust.weight(source, FACT), trusted, until=now + horizon))
        elif h.kind == FANOUT:
            total = max(int(h.branches), len(h.branch_ids), 1)
            w = self.checks.watch(h.session_id, source, FANOUT, FACT, now, now + cfg.fanout_horizon_s, ctx_tokens)
            if w is not None:
                w.fanout_left = w.fanout_total = total
                w.fanout_ids = frozenset(h.branch_ids)
                for bid in h.branch_ids:
                    self.checks.alias(bid, w)
            if acted and key is not None:
                self._set_plan(
                    key, _Plan(FANOUT, source, trust.weight(source, FACT), None, until=now + cfg.fanout_horizon_s)
                )
        elif h.kind == NEXT_AGENT:
            aid = self.names.get(h.agent) if h.agent else None
            agent = self.policy.agents.by_id.get(aid) if aid else None
            tokens = int(agent.tokens) if agent is not None else 0
            w = self.checks.watch(
                h.session_id, source, NEXT_AGENT, PREDICTION, now, now + cfg.next_agent_horizon_s, tokens
            )
            if w is not None:
                w.agent_name, w.agent_id = h.agent, aid
            if acted and agent is not None and key is not None:
                weight = trust.weight(source, PREDICTION) * min(1.0, max(0.0, h.probability))
                self._set_plan(
                    key, _Plan(NEXT_AGENT, source, weight, None, agent_id=aid, until=now + cfg.next_agent_horizon_s)
                )
        elif h.kind == SESSION_ENDED:
            self.checks.watch(h.session_id, source, SESSION_ENDED, FACT, now, now + cfg.ended_watch_s, ctx_tokens)
            if acted and h.session_id:
                self.release(h.session_id, now)
        elif h.kind in (PIN, RETAIN):
            self._pin(h, source, key, now)
        return outcome

    def _session_key(self, sid: str | None) -> tuple[str, str] | None:
        """The tracked session with this id (hints need not carry the tenant's salt)."""
        if not sid:
            return None
        tracker = self.policy.sessions
        for tenant in self.policy.agents.tenants:
            key = tracker.run_key(tenant, sid)  # an id names a run: its latest conversation
            if key is not None:
                return key
        return None

    def _set_plan(self, key: tuple[str, str], plan: _Plan) -> None:
        self.plans[key] = plan
        self.plans.move_to_end(key)
        while len(self.plans) > MAX_ACTIVE:
            self.plans.popitem(last=False)

    def _pin(self, h: Hint, source: str, key: tuple[str, str] | None, now: float) -> None:
        ttl = min(self.cfg.directive_max_ttl_s, max(0.0, h.ttl_s if h.ttl_s is not None else 300.0))
        slot: tuple[str, Any]
        if h.agent:
            aid = self.names.get(h.agent)
            if aid is None:
                return
            slot = ("a", aid)
        elif key is not None:
            slot = ("s", key)
        else:
            return
        if ttl <= 0:
            self.pins.pop(slot, None)
            return
        self.pins[slot] = _Plan(h.kind, source, 1.0, None, agent_id=aid if h.agent else None, until=now + ttl)
        while len(self.pins) > MAX_ACTIVE:
            self.pins.popitem(last=False)

    # --- release ---------------------------------------------------------------------------------------
    def release(self, sid: str, now: float) -> int:
        """``session_ended``: stop every protective action for the session at once. Returns the
        context tokens released. Its candidates (hinted, dirty, fan-out), pins and tracked state go,
        so neither plans nor sweeps touch it again; its blocks age out as the engine's own."""
        released = 0
        pol = self.policy
        for tenant in list(pol.agents.tenants):
            key = pol.sessions.run_key(tenant, sid) or (tenant, sid)  # the run's latest conversation
            self.plans.pop(key, None)
            self.pins.pop(("s", key), None)
            planner = pol.planner
            planner.dirty.pop(key, None)
            planner.fanout.pop(key, None)
            s = pol.sessions.sessions.get(key)
            if s is not None:
                released += int(sum(s.block_tokens))
                pol.sessions._drop(s)
        if released:
            self.released_sessions += 1
            self.released_tokens += released
        return released

    # --- checks from traffic -----------------------------------------------------------------------------
    def observe(
        self, tenant: str, session_id: str | None, agent_id: str | None, agent_name: str | None, now: float
    ) -> None:
        """A client request was observed (after ``ScoutPolicy.observe_request``)."""
        if agent_name and agent_id:
            names = self.names
            names[agent_name] = agent_id
            names.move_to_end(agent_name)
            if len(names) > MAX_NAMES:
                names.popitem(last=False)
        if not session_id:
            return
        if self.plans:
            plan = self.plans.get((tenant, session_id))
            if plan is not None and plan.kind != FANOUT:
                del self.plans[(tenant, session_id)]  # the demand arrived
        for w in self.checks.observe(session_id, agent_id, agent_name, now):
            self._drop_fanout_plan(w, tenant)  # its branches all arrived

    def _drop_fanout_plan(self, w: Watch, tenant: str) -> None:
        for key, plan in list(self.plans.items()):
            if plan.kind == FANOUT and plan.source == w.check.source and key[0] == tenant:
                del self.plans[key]
                break

    # --- planner hook ------------------------------------------------------------------------------------
    def candidates(self, now: float) -> list[HintCandidate]:
        """Candidates for this plan: every live hinted session, and pins due for a refresh."""
        if self.checks.due(now):
            self.checks.expire(now)
        out: list[HintCandidate] = []
        if self.plans:
            self._plan_candidates(now, out)
        if self.pins:
            self._pin_candidates(now, out)
        self.last_offered = {c.anchor_id: (c.kind, c.source) for c in out} if out else {}
        offered = self.offered
        for c in out:
            offered[c.anchor_id] = (c.kind, c.source)
            offered.move_to_end(c.anchor_id)
        while len(offered) > MAX_OFFERED:
            offered.popitem(last=False)
        return out

    def note(self, actions: Sequence[Action]) -> None:
        """The planner's actions of this plan (its hook): a warm spends the hint's warm."""
        plans = self._anchor_plan
        for a in actions:
            if a.kind == WARM:
                plan = plans.get(a.anchor_id)
                if plan is not None:
                    plan.warms_left -= 1

    def _plan_candidates(self, now: float, out: list[HintCandidate]) -> None:
        self._anchor_plan.clear()
        sessions = self.policy.sessions.sessions
        by_id = self.policy.agents.by_id
        stale = []
        for key, plan in self.plans.items():
            s = sessions.get(key)
            if plan.until < now or s is None:
                stale.append(key)
                continue
            if plan.kind == NEXT_AGENT:
                a = by_id.get(plan.agent_id) if plan.agent_id is not None else None
                if a is None or a.payload is None or not a.anchor_hashes:
                    stale.append(key)
                    continue
                self._anchor_plan[a.agent_id] = plan
                out.append(
                    HintCandidate(
                        plan.weight * a.tokens,
                        REASON_TRANSITION,
                        a.tenant,
                        a.agent_id,
                        a.anchor_hashes,
                        a.anchor_block_tokens,
                        a.payload,
                        plan.weight,
                        None,
                        plan.warms_left > 0,
                        False,
                        plan.kind,
                        plan.source,
                    )
                )
                continue
            if s.inflight or not s.hashes or s.context_payload is None:
                continue  # its request is running: nothing to keep yet
            lead = None
            if plan.expected_at is not None and plan.expected_at > now:
                lead = plan.expected_at - now
            reason = REASON_FANOUT if plan.kind == FANOUT else REASON_TOOL_RESUME
            payload = ActionPayload(s.context_payload, s.assistant_payload)
            aid = agent_id_for(key[0], s.hashes[-1])
            self._anchor_plan[aid] = plan
            out.append(
                HintCandidate(
                    plan.weight * sum(s.block_tokens),
                    reason,
                    key[0],
                    aid,
                    s.hashes,
                    s.block_tokens,
                    payload,
                    plan.weight,
                    lead,
                    plan.warms_left > 0,
                    True,
                    plan.kind,
                    plan.source,
                )
            )
        for key in stale:
            self.plans.pop(key, None)

    def _pin_candidates(self, now: float, out: list[HintCandidate]) -> None:
        pol = self.policy
        cap = pol.residency.capacity_tokens * self.cfg.directive_cache_share
        used = 0.0
        stale = []
        for slot, pin in self.pins.items():
            if pin.until < now:
                stale.append(slot)
                continue
            if slot[0] == "a":
                a = pol.agents.by_id.get(slot[1])
                if a is None or a.payload is None or not a.anchor_hashes:
                    continue
                tenant, aid, hashes, toks, payload, ctx = (
                    a.tenant,
                    a.agent_id,
                    a.anchor_hashes,
                    a.anchor_block_tokens,
                    a.payload,
                    False,
                )
            else:
                s = pol.sessions.sessions.get(slot[1])
                if s is None or not s.hashes or s.context_payload is None:
                    continue
                tenant, aid, hashes, toks = slot[1][0], agent_id_for(slot[1][0], s.hashes[-1]), s.hashes, s.block_tokens
                # an operator order: retained like an anchor (engine priority), not as a session context
                payload, ctx = ActionPayload(s.context_payload, s.assistant_payload), False
            tokens = float(sum(toks))
            if cap and used + tokens > cap:
                continue  # over the operator's cache share
            used += tokens
            if now - pin.last_offered < PIN_REFRESH_S:
                continue
            pin.last_offered = now
            out.append(
                HintCandidate(
                    tokens, REASON_HINT, tenant, aid, hashes, toks, payload, 1.0, None, True, ctx, pin.kind, pin.source
                )
            )
        for slot in stale:
            self.pins.pop(slot, None)

    # --- introspection ----------------------------------------------------------------------------------
    def report(self) -> dict[str, object]:
        return {
            "sources": self.trust.report(),
            "active_plans": len(self.plans),
            "pins": len(self.pins),
            "awaiting_checks": self.trust.pending,
            "released_sessions": self.released_sessions,
            "released_tokens": self.released_tokens,
            "outcomes": {f"{k}/{o}": n for (k, o), n in sorted(self.trust.outcomes.items())},
        }
