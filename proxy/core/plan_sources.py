"""The planner's candidate sources that read the agents' transitions and the runtime: the
successors of a session that changed, parked fan-out parents, runtime hints and the survival sweep
of anchors; and ``SessionLoop``, which offers each changed session to the per-session sources.

Each source is a piece (plan_piece.py): a class with its name, the skip reasons it records, the
action reasons its candidates carry and its state, registered by one line in
``plan_registry.PIECES``; it talks to the planner only through the ``Tick`` (plan_tick.py). The
other sources have modules of their own: the tool resume and the session sweep (plan_resume.py),
the successor contexts (plan_contexts.py), the lineage resume (plan_lineage.py).

Order matters and is the registry's order: the sessions that just changed first (each one's own
tool resume, then its predicted successors, then their contexts), parked fan-out parents, runtime
hints, lineage resumes, then, when the sweep is due, the survival sweep of anchors and the
paused-session sweep. Candidates are sorted by score afterwards (a stable sort: the registry order
breaks ties).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .actions import REASON_FANOUT, REASON_SWEEP, REASON_TOOL_RESUME, REASON_TRANSITION
from .agents import Agent, agent_id_for
from .candidates import Candidate
from .config import PolicyConfig
from .plan_filters import Cooldown, Deferred, Gate, Resident
from .plan_piece import AT_SWEEP, PER_SESSION, PER_TICK, SESSIONS, SOURCE, Piece
from .plan_resume import pause_lead
from .plan_sweep import reachable_agents
from .plan_tick import SessionSource, Tick
from .sessions import Session
from .survival import anchor_score


def anchor_candidate(agent: Agent, p: float, reason: str, now: float, cfg: PolicyConfig, **kw: Any) -> Candidate:
    """An agent's anchor as a candidate, scored by survival (the successors and the anchor sweep)."""
    assert agent.payload is not None
    return Candidate(
        score=anchor_score(p, now - agent.last_seen, agent.tokens, cfg.delta, cfg.age_lambda),
        reason=reason,
        tenant=agent.tenant,
        anchor_id=agent.agent_id,
        hashes=agent.anchor_hashes,
        block_tokens=agent.anchor_block_tokens,
        payload=agent.payload,
        prob=p,
        **kw,
    )


class Successors(Piece):
    """The predicted next agents of a session that just changed: the top-1 (``transition``) and
    further successors with P >= τ (``fanout``, touch only beyond ``warm_top_k``). Behind the R gate.

    Asks ``Cooldown``, ``Resident`` (its memo) and ``Deferred`` before a candidate is built,
    because this loop runs for nearly every request: the same pieces the pipeline runs later,
    switched off by the same names."""

    name = "successors"
    kind = SOURCE
    cadence = PER_SESSION
    reasons = (REASON_TRANSITION, REASON_FANOUT)
    settings = ("top_k", "tau", "warm_top_k", "plan_trigger", "delta", "age_lambda")

    def begin(self, t: Tick) -> None:
        pass

    def session(self, t: Tick, s: Session, agent: Agent, paused: bool, lead: float | None) -> None:
        now, cfg = t.now, t.cfg
        drop = t.rec.drop  # Tick.drop without its frame: this loop runs for nearly every request
        tenant = agent.tenant
        name = self.name
        g = t.gates.verdicts.get(tenant)  # the Gate piece's verdict this tick, decided once per tenant
        if not (t.gate(tenant) if g is None else g):  # the most common no-op: counted like any other skip
            drop(Gate.name, "gate_closed", now, name, REASON_TRANSITION, agent.agent_id, tenant)
            return
        ts = t.registry.tenant(tenant)
        trigger = cfg.plan_trigger
        by_slot = ts.by_slot
        # the maps the Cooldown and Resident pieces read (None: switched off); a piece's rule is
        # asked only for an anchor it holds an entry for (the common miss costs one lookup)
        off = t.off
        last_acted = t.last_acted if Cooldown.name not in off else None
        resident = t.resident
        memo = resident.memo if Resident.name not in off else None
        res = t.residency
        for rank, (slot, p) in enumerate(ts.learner.successors(agent.slot, cfg.top_k, cfg.tau)):
            nxt = by_slot.get(slot)
            if nxt is None or nxt.payload is None or not nxt.anchor_hashes:
                continue
            reason = REASON_TRANSITION if rank == 0 else REASON_FANOUT
            aid = nxt.agent_id
            if last_acted and aid in last_acted and Cooldown.cooling(last_acted, aid, now, cfg.cooldown_s):
                drop(Cooldown.name, "cooldown", now, name, reason, aid, tenant, p)
                continue
            if memo and aid in memo and resident.remembered(aid, res):
                drop(Resident.name, "resident", now, name, reason, aid, tenant, p)
                continue
            if rank >= cfg.warm_top_k:
                warm_ok = False  # lower-ranked successors are only kept, not re-made
            else:
                warm_ok = paused or trigger == "request"
            if not paused and trigger == "auto":
                # act now only if the pause after this response is too short for a warm then
                gap = agent.gap_median
                if gap is not None and t.defers(gap, cfg.reload_s(nxt.tokens)):
                    drop(Deferred.name, "deferred", now, name, reason, aid, tenant, p)
                    continue  # planned again when the response ends
                warm_ok = rank < cfg.warm_top_k
            out = anchor_candidate(nxt, p, reason, now, cfg, lead=lead, warm_ok=warm_ok, session=s.key, soon=not paused)
            out.source = name
            t.out.append(out)


class SessionLoop:
    """The sessions that changed since the last tick (``Tick.dirty``), each offered in turn to the
    enabled per-session sources (registry order: its tool resume, its successors, its successors'
    contexts). Not a piece: it only walks the sessions; the sources it calls are switched off by
    their own names. A session whose agent is gone is dropped here (stage ``sessions``)."""

    def collect(self, t: Tick, sources: Sequence[SessionSource]) -> None:
        for src in sources:
            src.begin(t)
        if not t.dirty:
            return
        sessions = t.sessions.sessions
        registry = t.registry
        now = t.now
        for key in t.dirty:
            s = sessions.get(key)
            if s is None:
                continue
            agent = s.agent
            if agent is None or registry.by_id.get(agent.agent_id) is not agent:  # registry.alive
                t.drop(SESSIONS, "no_agent", "", REASON_TRANSITION)
                continue
            paused = s.inflight == 0 and s.last_end is not None
            lead = None
            if paused:
                tool = s.finish == "tool_calls"
                elapsed = now - s.last_end if s.last_end is not None else 0.0  # (paused: it is set)
                lead = pause_lead(agent.tool_gap_median if tool else agent.gap_median, elapsed)
            for src in sources:
                src.session(t, s, agent, paused, lead)


class FanoutParents(Piece):
    """Parents of fan-outs the policy detected (``Tick.fanout``): a fact (the siblings are
    running on it), so not gated; touch/retain only."""

    name = "fanout_parents"
    kind = SOURCE
    cadence = PER_TICK
    reasons = (REASON_FANOUT,)
    settings = ("fanout_enabled", "fanout_max_bytes")

    def collect(self, t: Tick) -> None:
        for agent, hashes, toks, payload in t.fanout.values():
            t.out.append(
                Candidate(
                    score=float(sum(toks)),
                    reason=REASON_FANOUT,
                    tenant=agent.tenant,
                    anchor_id=agent_id_for(agent.tenant, hashes[-1]),
                    hashes=hashes,
                    block_tokens=toks,
                    payload=payload,
                    prob=1.0,
                    lead=None,
                    warm_ok=False,
                    context=True,
                    source=self.name,
                )
            )


class RuntimeHintsSource(Piece):
    """Runtime hints (core.hint_actions.HintDriver): facts and trusted predictions, each with its
    own timing (the driver defers far ones), so imminent. Its candidates carry the reason of what
    they predict."""

    name = "runtime_hints"
    kind = SOURCE
    cadence = PER_TICK
    reasons = (REASON_TRANSITION, REASON_FANOUT, REASON_TOOL_RESUME)

    def collect(self, t: Tick) -> None:
        hints = t.hints
        if hints is None:
            return
        for h in hints.candidates(t.now):
            t.out.append(
                Candidate(
                    score=h.score,
                    reason=h.reason,
                    tenant=h.tenant,
                    anchor_id=h.anchor_id,
                    hashes=h.hashes,
                    block_tokens=h.block_tokens,
                    payload=h.payload,
                    prob=h.prob,
                    lead=h.lead,
                    warm_ok=h.warm_ok,
                    context=h.context,
                    session=None,
                    soon=True,
                    source=self.name,
                )
            )


class AnchorSweep(Piece):
    """The survival sweep (reason ``hint``, a deployed label value): every ``sweep_interval_s``,
    the ``sweep_top_n`` anchors nearest a live session's current agent (survival.p_surv), kept
    where they are."""

    name = "anchor_sweep"
    kind = SOURCE
    cadence = AT_SWEEP
    reasons = (REASON_SWEEP,)
    settings = ("sweep_interval_s", "sweep_top_n", "max_hops", "tau")

    def collect(self, t: Tick) -> None:
        if not t.sweep_due:
            return
        now, cfg = t.now, t.cfg
        scored: list[Candidate] = []

        def admit(tenant: str) -> bool:
            if t.gate(tenant):
                return True
            t.drop(Gate.name, "gate_closed", self.name, REASON_SWEEP, "", tenant)  # the tenant's whole sweep
            return False

        for a, p in reachable_agents(t.registry, t.sessions.on_agent, cfg.max_hops, cfg.tau, admit):
            if a.payload is None or not a.anchor_hashes:
                continue
            c = anchor_candidate(a, p, REASON_SWEEP, now, cfg, lead=None)
            c.source = self.name
            scored.append(c)
        scored.sort(key=lambda c: c.score, reverse=True)
        t.out.extend(scored[: cfg.sweep_top_n])
