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

from collections.abc import Sequence
from typing import Any

from .actions import WARM, Action
from .hint_candidates import HintHost, HintPlan, pin_candidates, plan_candidates
from .hint_checks import CheckBook, Key, Watch
from .hint_scope import HintScope, SessionKey
from .hint_tables import OBJECT_BYTES, ByteLRU, key_bytes
from .hint_trust import TrustBook
from .hints import (
    ACCEPTED,
    FACT,
    FANOUT,
    IGNORED_UNCHECKED,
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
    hint_class,
)

__all__ = ["Hint", "HintCandidate", "HintDriver"]

MAX_ACTIVE = 512  # sessions with a hint-driven plan at once (count cap; the byte budget binds too)
PLAN_BYTES = OBJECT_BYTES + 64  # a _Plan (its strings are shared with the hint and the source table)
EXPOSED = (TOOL_STARTED, TOOL_FINISHED, FANOUT, NEXT_AGENT)  # drive actions until checked


_Plan = HintPlan  # the driver's name for it


class HintDriver:
    def __init__(self, policy: HintHost, config: HintConfig | None = None) -> None:
        """``policy``: what holds the agents, sessions, shadow and planner (a ``ScoutPolicy``)."""
        self.policy = policy
        self.cfg = config or HintConfig()
        self.trust = TrustBook(self.cfg)
        budget = self.cfg.state_max_bytes
        self.plans: ByteLRU[SessionKey, _Plan] = ByteLRU(budget)  # session key -> plan
        self.pins: ByteLRU[tuple[str, Any], _Plan] = ByteLRU(budget)  # ("s"/"a", key) -> pin
        self.checks = CheckBook(self.trust)  # hints awaiting the traffic that checks them
        self.scope = HintScope(budget)  # session owners and agent names, per tenant and principal
        self.offered: ByteLRU[str, tuple[str, str]] = ByteLRU(budget)  # anchor id -> (kind, source)
        self.last_offered: dict[str, tuple[str, str]] = {}  # ... of the latest plan only
        self._anchor_plan: dict[str, _Plan] = {}  # ... and the plan behind it
        self.released_sessions = 0
        self.released_tokens = 0

    @property
    def names(self) -> dict[str, str]:
        """The agent names bound in the default scope (tenant "", no credential)."""
        return self.scope.named()

    @property
    def watching(self) -> bool:
        """Whether ``observe`` has anything to do for a request without an agent name."""
        return bool(self.checks.watches or self.plans)

    # --- inputs ------------------------------------------------------------------------------------
    def refused(self, hints: Sequence[Hint], source: str) -> list[int]:
        """Indices of directives this source may not give (the edge refuses the whole batch)."""
        allowed = source in self.cfg.directive_sources
        return [i for i, h in enumerate(hints) if hint_class(h.kind) == "directive" and not allowed]

    def submit(
        self, hints: Sequence[Hint], source: str, now: float, tenant: str = "", principal: str = ""
    ) -> list[str]:
        """Admit and apply each hint in order, within the caller's scope (``tenant``: its
        ``cache_salt``; ``principal``: its credential's hash); returns one admission outcome per
        hint. The first hint attaches the driver to the planner (until then planning is exactly
        hint-less)."""
        if self.policy.planner.hints is not self:
            self.policy.planner.hints = self
        return [self._one(h, source, now, tenant, principal) for h in hints]

    def _one(self, h: Hint, source: str, now: float, tenant: str, principal: str) -> str:
        trust = self.trust
        outcome = trust.admit(source, h.kind, now, h.probability if h.kind == NEXT_AGENT else 1.0)
        if outcome == REFUSED:
            return outcome
        acted = outcome == ACCEPTED
        cfg = self.cfg
        key = self._session_key(tenant, principal, h.session_id)
        ckey: Key | None = (tenant, principal, h.session_id) if h.session_id else None
        session = self.policy.sessions.sessions.get(key) if key is not None else None
        ctx_tokens = int(sum(session.block_tokens)) if session is not None else 0
        checks = self.checks
        w: Watch | None = None
        if h.kind in (TOOL_STARTED, TOOL_FINISHED):
            expected_at = now + h.expected_s if h.kind == TOOL_STARTED and h.expected_s is not None else None
            if h.kind == TOOL_FINISHED:
                checks.close_duration(ckey, now)
            horizon = max(cfg.resume_horizon_s, 3.0 * min(h.expected_s or 0.0, cfg.directive_max_ttl_s))
            w = checks.watch(ckey, source, h.kind, FACT, now, now + horizon, ctx_tokens)
            if w is not None and expected_at is not None:
                checks.watch(
                    ckey, source, "tool_duration", PREDICTION, now, now + horizon, ctx_tokens, expected_at=expected_at
                )
            if acted and w is not None and key is not None:
                trusted = expected_at if trust.weight(source, PREDICTION) >= cfg.prediction_min_p else None
                self._set_plan(key, _Plan(h.kind, source, trust.weight(source, FACT), trusted, until=now + horizon))
        elif h.kind == FANOUT:
            total = max(int(h.branches), len(h.branch_ids), 1)
            w = checks.watch(
                ckey, source, FANOUT, FACT, now, now + cfg.fanout_horizon_s, ctx_tokens, branch_ids=h.branch_ids
            )
            if w is not None:
                w.fanout_left = w.fanout_total = total
                w.fanout_ids = frozenset(h.branch_ids)
            if acted and w is not None and key is not None:
                self._set_plan(
                    key, _Plan(FANOUT, source, trust.weight(source, FACT), None, until=now + cfg.fanout_horizon_s)
                )
        elif h.kind == NEXT_AGENT:
            aid = self.scope.agent(tenant, principal, h.agent)
            agent = self.policy.agents.by_id.get(aid) if aid else None
            tokens = int(agent.tokens) if agent is not None else 0
            w = checks.watch(
                ckey, source, NEXT_AGENT, PREDICTION, now, now + cfg.next_agent_horizon_s, tokens, agent_name=h.agent
            )
            if w is not None:
                w.agent_id = aid
            if acted and w is not None and agent is not None and key is not None:
                weight = trust.weight(source, PREDICTION) * min(1.0, max(0.0, h.probability))
                self._set_plan(
                    key, _Plan(NEXT_AGENT, source, weight, None, agent_id=aid, until=now + cfg.next_agent_horizon_s)
                )
        elif h.kind == SESSION_ENDED:
            w = checks.watch(ckey, source, SESSION_ENDED, FACT, now, now + cfg.ended_watch_s, ctx_tokens)
            if acted and w is not None and h.session_id:
                self.release(h.session_id, now, tenant, principal)
        elif h.kind in (PIN, RETAIN):
            self._pin(h, source, key, now, tenant, principal)
        if acted and w is None and h.kind in (*EXPOSED, SESSION_ENDED) and h.session_id:
            # its check could not be opened (bounds): an unchecked hint drives nothing
            trust.demote(source, h.kind, ACCEPTED, IGNORED_UNCHECKED)
            return IGNORED_UNCHECKED
        return outcome

    def _session_key(self, tenant: str, principal: str, sid: str | None) -> SessionKey | None:
        """The tracked session with this id in the caller's scope (its tenant, its principal's)."""
        if not sid:
            return None
        key = self.policy.sessions.run_key(tenant, sid)  # an id names a run: its latest conversation
        if key is not None and self.scope.owns(tenant, sid, principal):
            return key
        return None

    def _set_plan(self, key: SessionKey, plan: _Plan) -> None:
        self.plans.put(key, plan, PLAN_BYTES + key_bytes(key))
        while len(self.plans) > MAX_ACTIVE and self.plans.evict_one(protect=key):
            pass

    def _pin(self, h: Hint, source: str, key: SessionKey | None, now: float, tenant: str, principal: str) -> None:
        ttl = min(self.cfg.directive_max_ttl_s, max(0.0, h.ttl_s if h.ttl_s is not None else 300.0))
        slot: tuple[str, Any]
        aid = None
        if h.agent:
            aid = self.scope.agent(tenant, principal, h.agent)
            if aid is None:
                return
            slot = ("a", aid)
        elif key is not None:
            slot = ("s", key)
        else:
            return
        if ttl <= 0:
            self.pins.pop(slot)
            return
        size = PLAN_BYTES + (key_bytes(key) if key is not None and slot[0] == "s" else 2 * len(str(aid)) + 64)
        self.pins.put(slot, _Plan(h.kind, source, 1.0, None, agent_id=aid, until=now + ttl), size)
        while len(self.pins) > MAX_ACTIVE and self.pins.evict_one(protect=slot):
            pass

    # --- release ---------------------------------------------------------------------------------------
    def release(self, sid: str, now: float, tenant: str = "", principal: str = "") -> int:
        """``session_ended``: stop every protective action for the caller's session at once.
        Returns the context tokens released. Its candidates (hinted, dirty, fan-out), pins and
        tracked state go, so neither plans nor sweeps touch it again; its blocks age out as the
        engine's own. Only the caller's own session (its tenant, its principal's): nobody else's."""
        released = 0
        pol = self.policy
        if self.scope.owns(tenant, sid, principal):
            key = pol.sessions.run_key(tenant, sid) or (tenant, sid)  # the run's latest conversation
            self.plans.pop(key)
            self.pins.pop(("s", key))
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
        self,
        tenant: str,
        session_id: str | None,
        agent_id: str | None,
        agent_name: str | None,
        now: float,
        principal: str = "",
    ) -> None:
        """A client request was observed (after ``ScoutPolicy.observe_request``), from ``principal``."""
        if agent_name and agent_id:
            self.scope.bind(tenant, principal, agent_name, agent_id)
        if not session_id:
            return
        if self.plans:
            plan = self.plans.get((tenant, session_id))
            if plan is not None and plan.kind != FANOUT:
                self.plans.pop((tenant, session_id))  # the demand arrived
        for w in self.checks.observe((tenant, principal, session_id), agent_id, agent_name, now):
            self._drop_fanout_plan(w, tenant)  # its branches all arrived

    def _drop_fanout_plan(self, w: Watch, tenant: str) -> None:
        for key, plan in list(self.plans.items()):
            if plan.kind == FANOUT and plan.source == w.check.source and key[0] == tenant:
                self.plans.pop(key)
                break

    # --- planner hook ------------------------------------------------------------------------------------
    def candidates(self, now: float) -> list[HintCandidate]:
        """Candidates for this plan: every live hinted session, and pins due for a refresh."""
        if self.checks.due(now):
            self.checks.expire(now)
        out: list[HintCandidate] = []
        if self.plans:
            plan_candidates(self.plans, self._anchor_plan, self.policy, now, out)
        if self.pins:
            pin_candidates(self.pins, self.policy, self.cfg.directive_cache_share, now, out)
        self.last_offered = {c.anchor_id: (c.kind, c.source) for c in out} if out else {}
        offered = self.offered
        for c in out:
            offered.put(c.anchor_id, (c.kind, c.source), key_bytes((c.anchor_id,)) + 64)
        return out

    def note(self, actions: Sequence[Action]) -> None:
        """The planner's actions of this plan (its hook): a warm spends the hint's warm."""
        plans = self._anchor_plan
        for a in actions:
            if a.kind == WARM:
                plan = plans.get(a.anchor_id)
                if plan is not None:
                    plan.warms_left -= 1

    # --- introspection ----------------------------------------------------------------------------------
    def report(self) -> dict[str, object]:
        return {
            "sources": self.trust.report(),
            "active_plans": len(self.plans),
            "pins": len(self.pins),
            "awaiting_checks": self.trust.pending,
            "open_checks": sum(len(v) for v in self.checks.by_source.values()),
            "dropped_checks": self.checks.dropped,
            "pinned_agents": sorted(str(slot[1]) for slot in self.pins if slot[0] == "a"),
            "bytes": self.table_bytes(),
            "released_sessions": self.released_sessions,
            "released_tokens": self.released_tokens,
            "outcomes": {f"{k}/{o}": n for (k, o), n in sorted(self.trust.outcomes.items())},
        }

    def table_bytes(self) -> dict[str, int]:
        """Each hint table's charged bytes (each within its budget)."""
        return {
            "sources": self.trust.sources.bytes,
            "checks": self.checks.bytes,
            "plans": self.plans.bytes,
            "pins": self.pins.bytes,
            "owners": self.scope.owners.bytes,
            "names": self.scope.names.bytes,
            "offered": self.offered.bytes,
        }
