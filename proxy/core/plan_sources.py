"""The planner's candidate sources, one class each, and their registry (``SOURCES``).

Each source turns one kind of evidence into ``Candidate``s (candidates.py) and records, by name,
every candidate it does not offer (``Tick.p._drop``). Why classes behind one protocol: adding a
signal is one class here (or in a module of its own), its test (tests/core/test_plan_sources.py)
and one line in ``SOURCES``; ``PolicyConfig.disabled_pieces`` switches any of them off by name.

Order matters and is the registry's order: the sessions that just changed first (each one's own
tool resume, then its predicted successors), parked fan-out parents, runtime hints (``SOURCES``),
then, when the sweep is due, the survival sweep of anchors and the paused-session sweep
(``SWEEP_SOURCES``). Candidates are sorted by
score afterwards (a stable sort: the registry order breaks ties).
"""

from __future__ import annotations

from typing import Any

from .actions import REASON_FANOUT, REASON_SWEEP, REASON_TOOL_RESUME, REASON_TRANSITION
from .agents import Agent, agent_id_for
from .candidates import Candidate, CandidateSource, Tick
from .config import PolicyConfig
from .plan_contexts import SUCCESSOR_CONTEXTS, SuccessorContexts
from .plan_lineage import LINEAGE_RESUME, LineageResume
from .plan_resume import TOOL_RESUME, ToolResume, offer_pause, pause_lead, wake_gaps

__all__ = ["SOURCES", "SWEEP_SOURCES", "CandidateSource"]
from .plan_sweep import reachable_agents
from .sessions import Session
from .survival import anchor_score

# piece names (PolicyConfig.disabled_pieces; docs/policy.md)
SUCCESSORS = "successors"
FANOUT_PARENTS = "fanout_parents"
RUNTIME_HINTS = "runtime_hints"
ANCHOR_SWEEP = "anchor_sweep"
SESSION_SWEEP = "session_sweep"


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


class Successors:
    """The predicted next agents of a session that just changed: the top-1 (``transition``) and
    further successors with P >= τ (``fanout``, touch only beyond ``warm_top_k``). Behind the R gate.

    The cooldown, the resident memo and the deferral are checked here, before a candidate is
    built, because this loop runs for nearly every request; they are the same verdicts the
    filters use (switched off by the same names)."""

    name = SUCCESSORS
    _tick: tuple[
        float, PolicyConfig, dict[str, bool] | None, dict[str, float], dict[str, tuple[int, float]], bool, int,
        float, list[Candidate],
    ]  # fmt: skip

    def begin(self, t: Tick) -> None:
        """This tick's constants, read once (the per-session loop below runs for nearly every
        request)."""
        p_, off = t.p, t.off
        res = p_.residency
        self._tick = (
            t.now,
            p_.cfg,
            t.gates if "gate" not in off else None,
            p_.last_acted if "cooldown" not in off else {},
            p_._safe if "resident_memo" not in off else {},
            "deferred" not in off,
            res.epoch,
            res.inserted_tokens,
            t.out,
        )

    def session(self, t: Tick, s: Session, agent: Agent, paused: bool, lead: float | None) -> None:
        now, cfg, gates, last_acted, safe, defer, epoch, inserted, out = self._tick
        p_ = t.p
        tenant = agent.tenant
        if gates is not None:
            g = gates.get(tenant)
            if g is None:
                g = p_._gate(tenant, gates)
            if not g:  # the most common no-op: counted like any other skip
                p_._drop("gate_closed", now, REASON_TRANSITION, agent.agent_id, tenant)
                return
        ts = p_.registry.tenant(tenant)
        trigger = cfg.plan_trigger
        by_slot = ts.by_slot
        cooldown = cfg.cooldown_s
        for rank, (slot, p) in enumerate(ts.learner.successors(agent.slot, cfg.top_k, cfg.tau)):
            nxt = by_slot.get(slot)
            if nxt is None or nxt.payload is None or not nxt.anchor_hashes:
                continue
            reason = REASON_TRANSITION if rank == 0 else REASON_FANOUT
            aid = nxt.agent_id
            last = last_acted.get(aid)
            if last is not None and now - last < cooldown:
                p_._drop("cooldown", now, reason, aid, tenant, p)
                continue
            memo = safe.get(aid)
            if memo is not None and memo[0] == epoch and inserted < memo[1]:
                p_._drop("resident", now, reason, aid, tenant, p)
                continue
            if rank >= cfg.warm_top_k:
                warm_ok = False  # lower-ranked successors are only kept, not re-made
            else:
                warm_ok = paused or trigger == "request"
            if not paused and trigger == "auto":
                # act now only if the pause after this response is too short for a warm then
                gap = agent.gap_median
                if defer and gap is not None and gap >= max(cfg.min_lead_s, cfg.reload_s(nxt.tokens)):
                    p_._drop("deferred", now, reason, aid, tenant, p)
                    continue  # planned again when the response ends
                warm_ok = rank < cfg.warm_top_k
            out.append(
                anchor_candidate(nxt, p, reason, now, cfg, lead=lead, warm_ok=warm_ok, session=s.key, soon=not paused)
            )


class DirtySessions:
    """The sessions that changed since the last tick (``Planner.dirty``), each offered in turn to
    its per-session sources: its tool resume, then its successors, then its successors' contexts in
    it (plan_contexts.py)."""

    name = "dirty_sessions"  # not a piece of its own: switch off tool_resume / successors

    def __init__(self) -> None:
        self.tool_resume = ToolResume()
        self.successors = Successors()
        self.successor_contexts = SuccessorContexts()

    def collect(self, t: Tick) -> None:
        p_ = t.p
        tool_on = TOOL_RESUME not in t.off
        if tool_on and self.tool_resume.wakes:
            self.tool_resume.due(t)
        if not p_.dirty:
            return
        sessions = p_.sessions.sessions
        registry = p_.registry
        now = t.now
        succ_on = SUCCESSORS not in t.off
        swept = SESSION_SWEEP not in t.off and p_.cfg.sweep_sessions > 0
        ctx_on = SUCCESSOR_CONTEXTS not in t.off and p_.cfg.successor_contexts > 0
        if succ_on:
            self.successors.begin(t)
        for key in p_.dirty:
            s = sessions.get(key)
            if s is None:
                continue
            agent = s.agent
            if agent is None or registry.by_id.get(agent.agent_id) is not agent:  # registry.alive
                p_._drop("no_agent", now, REASON_TRANSITION)
                continue
            paused = s.inflight == 0 and s.last_end is not None
            lead = None
            if paused:
                tool = s.finish == "tool_calls"
                elapsed = now - s.last_end if s.last_end is not None else 0.0  # (paused: it is set)
                lead = pause_lead(agent.tool_gap_median if tool else agent.gap_median, elapsed)
                if tool and tool_on:
                    # a warm waits for the pause's wakes or the session sweep when one comes later:
                    # planned now (the pause's start, or the first tick calm enough after it), a warm
                    # lands mid-burst and the rest of the burst evicts it again before the resume
                    woken = self.tool_resume.schedule(t, s, agent)
                    later = woken > 0 or (
                        swept and wake_gaps(registry, agent, p_.cfg) is None and sweep_in_time(p_.cfg, lead, s)
                    )
                    self.tool_resume.session(t, s, agent, elapsed, lead, warm_ok=not later)
            if succ_on:
                self.successors.session(t, s, agent, paused, lead)
            if ctx_on:
                self.successor_contexts.session(t, s, agent, paused, lead)


class FanoutParents:
    """Parents of fan-outs the policy detected (``Planner.fanout``): a fact (the siblings are
    running on it), so not gated; touch/retain only."""

    name = FANOUT_PARENTS

    def collect(self, t: Tick) -> None:
        for agent, hashes, toks, payload in t.p.fanout.values():
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
                )
            )


class RuntimeHintsSource:
    """Runtime hints (core.hint_actions.HintDriver): facts and trusted predictions, each with its
    own timing (the driver defers far ones), so imminent."""

    name = RUNTIME_HINTS

    def collect(self, t: Tick) -> None:
        hints = t.p.hints
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
                )
            )


class AnchorSweep:
    """The survival sweep (reason ``sweep``): every ``sweep_interval_s``, the ``sweep_top_n``
    anchors nearest a live session's current agent (survival.p_surv), kept where they are."""

    name = ANCHOR_SWEEP

    def collect(self, t: Tick) -> None:
        if not t.sweep_due:
            return
        p_, now = t.p, t.now
        cfg = p_.cfg
        scored: list[Candidate] = []
        gated = "gate" not in t.off

        def admit(tenant: str) -> bool:
            if not gated or t.gate(tenant):
                return True
            p_._drop("gate_closed", now, REASON_SWEEP, "", tenant)  # the tenant's whole sweep
            return False

        for a, p in reachable_agents(p_.registry, p_.sessions.on_agent, cfg.max_hops, cfg.tau, admit):
            if a.payload is None or not a.anchor_hashes:
                continue
            scored.append(anchor_candidate(a, p, REASON_SWEEP, now, cfg, lead=None))
        scored.sort(key=lambda c: c.score, reverse=True)
        t.out.extend(scored[: cfg.sweep_top_n])


def sweep_in_time(cfg: PolicyConfig, lead: float | None, s: Session) -> bool:
    """The next session sweep still lands a warm of ``s``'s context before its expected resume
    (``lead`` seconds away): a warm now would only give the traffic longer to evict it again. The
    next sweep comes an interval later at the earliest and may slip by up to another (it runs on a
    calm tick, and the live runtime ticks on a timer): two intervals to spare. (e2e check 7 with
    one interval: a 5 s pause's warm went at +4.97 s, 30 ms before the resume.)"""
    return lead is not None and lead - 2.0 * cfg.sweep_interval_s > cfg.reload_s(sum(s.block_tokens))


class SessionSweep:
    """Sessions paused on a tool call keep their context until their agent's tool pauses are learned.

    The tool resume plans a pause when it starts, when the context was just used (resident); its
    wakes re-check it at the agent's learned pause quantiles (plan_resume.py). Until an agent (or
    its tenant) has ``continuation_min_samples`` pauses, or with the wakes off, this sweep is what
    re-checks the pause, every ``sweep_interval_s`` on calm ticks: a fresh proxy's first tool
    resumes depend on it (``tests/live/test_tool_resume.py``). With a pause median known, a warm
    waits while the next sweep is still in time (``sweep_in_time``). Sessions paused after any other
    finish (a user's turn, the next agent of a team) are not swept: on the headroom grid keeping
    them made 17 of 288 cell-seeds > 1% slower (chat-agents: human think times outlive the cache,
    and the touches cost more than they keep) and 1 faster (docs/results/replay-capture.md). Walks the
    most recently active ``sweep_sessions`` sessions only, so a sweep stays O(that)."""

    name = SESSION_SWEEP

    def collect(self, t: Tick) -> None:
        cfg = t.p.cfg
        if not t.sweep_due or not cfg.sweep_sessions:
            return
        p_, now = t.p, t.now
        if not t.calm:
            # a paused context is where the shadow and the engine disagree most (the tail zone): its
            # "touch" often re-prefills thousands of tokens, and on an FCFS engine prefilling for
            # clients that delays them and every arrival behind them (docs/results/replay-capture.md)
            p_._drop("wait_for_slack", now, REASON_SWEEP)
            return
        woken = bool(cfg.resume_wake_quantiles) and TOOL_RESUME not in t.off
        scored: list[Candidate] = []
        for k, s in enumerate(reversed(p_.sessions.sessions.values())):
            if k >= cfg.sweep_sessions:
                break
            agent = s.agent
            if s.inflight or s.last_end is None or s.finish != "tool_calls":
                continue
            if woken and agent is not None and wake_gaps(p_.registry, agent, cfg) is not None:
                continue  # the tool resume's wakes re-check it (plan_resume.py)
            if agent is None or agent.forgotten:
                p_._drop("no_agent", now, REASON_TOOL_RESUME)
                continue
            elapsed = now - s.last_end
            lead = pause_lead(agent.tool_gap_median, elapsed)
            offer_pause(t, s, agent, elapsed, lead, not sweep_in_time(cfg, lead, s), scored)
        scored.sort(key=lambda c: c.score, reverse=True)
        t.out.extend(scored[: cfg.sweep_top_n])


# The registry: one line per source, in the order their candidates are collected; the sweep
# sources run only at the sweep cadence (sweep_interval_s), after the others.
SOURCES: tuple[type[CandidateSource], ...] = (
    DirtySessions,  # ToolResume, Successors, then SuccessorContexts, per session that changed
    FanoutParents,
    RuntimeHintsSource,
    LineageResume,  # text views: a paused lineage's resume (plan_lineage.py)
)
SWEEP_SOURCES: tuple[type[CandidateSource], ...] = (AnchorSweep, SessionSweep)
# per-session sources inside DirtySessions, and every source's piece name
SOURCE_NAMES = (
    TOOL_RESUME,
    SUCCESSORS,
    SUCCESSOR_CONTEXTS,
    FANOUT_PARENTS,
    RUNTIME_HINTS,
    ANCHOR_SWEEP,
    SESSION_SWEEP,
    LINEAGE_RESUME,
)
