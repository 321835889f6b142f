"""Where a plan's candidates come from: the sessions that just changed (their predicted next
agents, a paused session's own context), the survival sweep over the tenant's agents, and the
paused sessions likely to resume. Each candidate carries its score, its prefix and the predicted
demand; ``Planner._select`` (planner.py) then prices them (economics.py) and emits actions.

Why separate: collecting candidates is prediction (transitions, gaps, survival); selecting them is
economics and budgets. A mixin keeps the hot loops as methods on the planner's own state.
"""

from __future__ import annotations

from dataclasses import dataclass

from .action_payload import ActionPayload
from .actions import REASON_FANOUT, REASON_HINT, REASON_TOOL_RESUME, REASON_TRANSITION
from .agents import AgentRegistry, agent_id_for
from .config import PolicyConfig
from .decisions import ACTED, DecisionLog
from .economics import Verdict
from .residency import ResidencyShadow
from .sessions import Session, SessionTracker
from .survival import anchor_score, continuation_probability, reachable_agents


@dataclass(slots=True)
class Candidate:
    score: float
    reason: str
    tenant: str
    anchor_id: str
    hashes: tuple[int, ...]
    block_tokens: tuple[int, ...]
    payload: ActionPayload
    prob: float
    lead: float | None  # seconds until the predicted demand; None = unknown (not imminent)
    warm_ok: bool = True  # False: only touch (planned while the session's request still runs)
    context: bool = False  # a session's whole context (not an agent anchor)
    session: tuple[str, str] | None = None  # the session it was planned for (re-planned if it waits)
    soon: bool = False  # the demand follows a request still running (its pause is too short)


class CandidateSources:
    """The planner's candidate collection (mixed into ``Planner``, which owns this state)."""

    cfg: PolicyConfig
    registry: AgentRegistry
    sessions: SessionTracker
    residency: ResidencyShadow
    last_acted: dict[str, float]
    _safe: dict[str, tuple[int, float]]
    skipped: dict[str, int]  # Planner.skipped (SKIP_REASONS)
    decisions: DecisionLog
    _r: dict[str, float | None]  # tenant -> gate R this tick

    def _drop(
        self, stage: str, now: float, source: str = "", anchor: str = "", tenant: str = "", prob: float | None = None
    ) -> None:
        """Count a skip (decisions.SKIP_REASONS) and note it in the ring; no source = a whole tick."""
        self.skipped[stage] += 1
        self.decisions.note(now, stage, source, anchor, tenant, "", self._r.get(tenant) if source else None, prob)

    def _skip(
        self,
        stage: str,
        c: Candidate,
        now: float,
        v: Verdict | None = None,
        missing: float | None = None,
        kind: str = "",
    ) -> None:
        """A candidate's decision (a skip, counted, or ACTED), with the figures its stage compared."""
        if stage != ACTED:
            self.skipped[stage] += 1
        r = self._r.get(c.tenant)
        if v is None:
            self.decisions.note(now, stage, c.reason, c.anchor_id, c.tenant, kind, r, c.prob, missing, c.lead)
        else:
            self.decisions.note(
                now,
                stage,
                c.reason,
                c.anchor_id,
                c.tenant,
                kind or v.kind,
                r,
                c.prob,
                missing,
                c.lead,
                v.saving,
                v.cost,
                v.kept,
            )

    def _gate(self, tenant: str, gates: dict[str, bool]) -> bool:
        raise NotImplementedError  # Planner._gate

    def _session_candidates(self, s: Session, now: float, gates: dict[str, bool], out: list[Candidate]) -> None:
        cfg = self.cfg
        agent = s.agent
        registry = self.registry
        if agent is None or registry.by_id.get(agent.agent_id) is not agent:  # registry.alive
            self._drop("no_agent", now, REASON_TRANSITION)
            return
        paused = s.inflight == 0 and s.last_end is not None
        lead = None
        if paused:
            tool = s.finish == "tool_calls"
            samples = agent.tool_gaps if tool else agent.gaps
            med = agent.tool_gap_median if tool else agent.gap_median
            elapsed = now - s.last_end if s.last_end is not None else 0.0  # (paused: it is set)
            lead = med - elapsed if med is not None and elapsed < med else None
            if s.finish == "tool_calls" and not (s.hashes and s.context_payload is not None):
                self._drop("no_context", now, REASON_TOOL_RESUME, agent.agent_id, agent.tenant)  # nothing to rebuild
            elif s.finish == "tool_calls":
                p = continuation_probability(
                    samples,
                    elapsed,
                    cfg.continuation_horizon_s,
                    True,
                    cfg.tool_resume_prior,
                    cfg.continuation_prior,
                    cfg.continuation_min_samples,
                )
                if p < cfg.tool_resume_min_p:
                    self._drop("resume_unlikely", now, REASON_TOOL_RESUME, agent.agent_id, agent.tenant, p)
                elif cfg.tool_resume_gated and not self._gate(agent.tenant, gates):
                    self._drop("gate_closed", now, REASON_TOOL_RESUME, agent.agent_id, agent.tenant, p)
                else:
                    payload = ActionPayload(s.context_payload, s.assistant_payload)
                    out.append(
                        Candidate(
                            p * sum(s.block_tokens),
                            REASON_TOOL_RESUME,
                            agent.tenant,
                            agent_id_for(agent.tenant, s.hashes[-1]),
                            s.hashes,
                            s.block_tokens,
                            payload,
                            p,
                            lead,
                            True,
                            True,
                            s.key,
                        )
                    )
        tenant = agent.tenant
        g = gates.get(tenant)
        if g is None:
            g = self._gate(tenant, gates)
        if not g:  # the most common no-op: counted like any other skip
            self._drop("gate_closed", now, REASON_TRANSITION, agent.agent_id, tenant)
            return
        ts = registry.tenant(tenant)
        trigger = cfg.plan_trigger
        by_slot = ts.by_slot
        # _settled, inlined (this loop runs for nearly every request)
        last_acted, safe, cooldown = self.last_acted, self._safe, cfg.cooldown_s
        res = self.residency
        epoch, inserted = res.epoch, res.inserted_tokens
        for rank, (slot, p) in enumerate(ts.learner.successors(agent.slot, cfg.top_k, cfg.tau)):
            nxt = by_slot.get(slot)
            if nxt is None or nxt.payload is None or not nxt.anchor_hashes:
                continue
            aid = nxt.agent_id
            last = last_acted.get(aid)
            if last is not None and now - last < cooldown:
                self._drop("cooldown", now, REASON_TRANSITION if rank == 0 else REASON_FANOUT, aid, tenant, p)
                continue
            memo = safe.get(aid)
            if memo is not None and memo[0] == epoch and inserted < memo[1]:
                self._drop("resident", now, REASON_TRANSITION if rank == 0 else REASON_FANOUT, aid, tenant, p)
                continue
            if rank >= cfg.warm_top_k:
                warm_ok = False  # lower-ranked successors are only kept, not re-made
            else:
                warm_ok = paused or trigger == "request"
            if not paused and trigger == "auto":
                # act now only if the pause after this response is too short for a warm then
                gap = agent.gap_median
                if gap is not None and gap >= max(cfg.min_lead_s, cfg.reload_s(nxt.tokens)):
                    self._drop("deferred", now, REASON_TRANSITION if rank == 0 else REASON_FANOUT, aid, tenant, p)
                    continue  # planned again when the response ends
                warm_ok = rank < cfg.warm_top_k
            reason = REASON_TRANSITION if rank == 0 else REASON_FANOUT
            score = anchor_score(p, now - nxt.last_seen, nxt.tokens, cfg.delta, cfg.age_lambda)
            out.append(
                Candidate(
                    score,
                    reason,
                    nxt.tenant,
                    nxt.agent_id,
                    nxt.anchor_hashes,
                    nxt.anchor_block_tokens,
                    nxt.payload,
                    p,
                    lead,
                    warm_ok,
                    False,
                    s.key,
                    not paused,
                )
            )

    def _sweep_candidates(self, now: float, gates: dict[str, bool], out: list[Candidate]) -> None:
        cfg = self.cfg
        scored: list[Candidate] = []

        def admit(tenant: str) -> bool:
            if self._gate(tenant, gates):
                return True
            self._drop("gate_closed", now, REASON_HINT, "", tenant)  # the tenant's whole sweep
            return False

        for a, p in reachable_agents(self.registry, self.sessions.on_agent, cfg.max_hops, cfg.tau, admit):
            if a.payload is None or not a.anchor_hashes:
                continue
            score = anchor_score(p, now - a.last_seen, a.tokens, cfg.delta, cfg.age_lambda)
            scored.append(
                Candidate(
                    score, REASON_HINT, a.tenant, a.agent_id, a.anchor_hashes, a.anchor_block_tokens, a.payload, p, None
                )
            )
        scored.sort(key=lambda c: c.score, reverse=True)
        out.extend(scored[: cfg.sweep_top_n])
        if cfg.sweep_sessions:
            self._sweep_paused_sessions(now, gates, out)

    def _sweep_paused_sessions(self, now: float, gates: dict[str, bool], out: list[Candidate]) -> None:
        """Paused sessions likely to resume soon keep their context (session continuation).

        Walks the most recently active sessions only (``sweep_sessions`` of them), so a sweep
        stays O(that) however many sessions are live. A session continuing is a fact of its own
        history, not an agent-to-agent guess, but by default only tool_resume ignores the gate
        (``tool_resume_gated``/``session_gated``)."""
        cfg = self.cfg
        scored: list[Candidate] = []
        for k, s in enumerate(reversed(self.sessions.sessions.values())):
            if k >= cfg.sweep_sessions:
                break
            agent = s.agent
            if s.inflight or s.last_end is None:
                continue
            if agent is None or agent.forgotten or not s.hashes or s.context_payload is None:
                if s.finish == "tool_calls":
                    self._drop(
                        "no_agent" if agent is None or agent.forgotten else "no_context", now, REASON_TOOL_RESUME
                    )
                continue
            tool = s.finish == "tool_calls"
            if (cfg.tool_resume_gated if tool else cfg.session_gated) and not self._gate(agent.tenant, gates):
                self._drop(
                    "gate_closed", now, REASON_TOOL_RESUME if tool else REASON_HINT, agent.agent_id, agent.tenant
                )
                continue
            p = continuation_probability(
                agent.tool_gaps if tool else agent.gaps,
                now - s.last_end,
                cfg.continuation_horizon_s,
                tool,
                cfg.tool_resume_prior,
                cfg.continuation_prior,
                cfg.continuation_min_samples,
            )
            if p < cfg.tool_resume_min_p:
                self._drop(
                    "resume_unlikely", now, REASON_TOOL_RESUME if tool else REASON_HINT, agent.agent_id, agent.tenant, p
                )
                continue
            med = agent.tool_gap_median if tool else agent.gap_median
            elapsed = now - s.last_end
            lead = med - elapsed if med is not None and elapsed < med else None
            payload = ActionPayload(s.context_payload, s.assistant_payload)
            scored.append(
                Candidate(
                    p * sum(s.block_tokens),
                    REASON_TOOL_RESUME if tool else REASON_HINT,
                    agent.tenant,
                    agent_id_for(agent.tenant, s.hashes[-1]),
                    s.hashes,
                    s.block_tokens,
                    payload,
                    p,
                    lead,
                    tool,
                    True,
                    s.key,
                )
            )
        scored.sort(key=lambda c: c.score, reverse=True)
        out.extend(scored[: cfg.sweep_top_n])
