"""The successor-contexts source: when a session stops (not on a tool call), the context its
predicted next agent will reuse there.

Why (issue 21 item 5; docs/results/replay-capture.md): in a multi-agent session each agent's prompt is
its own anchor followed by its view of the session's history, so the next agent B's call in the
session extends B's *previous* prompt in that session, not the one that just finished (A's).
``Successors`` keeps B's anchor; this keeps the rest of what B's call will reuse, as far as the
proxy has seen it: B's latest prompt in the session (``SessionTracker.context_for``; kept per
session for ``successor_contexts`` agents). The oracle keeper that knows which sessions continue
and their seen prefix, but not when, captured 39% / 63% (median) of the oracle's gain in the
swebench / gaia cells where a keeper that only acts on tool pauses captured 0–3%: this is the
proxy's version of that knowledge, with the transition learner's P(B | A) for "which" and the
agent's learned pause (``Agent.gap_median``) for "when".

Behind the R gate like ``Successors``; only the top ``warm_top_k`` successors, and only another
agent than the one that just stopped (the same agent going on reuses the session's own context:
the session sweep's); a context that is only B's anchor is left to ``Successors``. Priced by
``economics.assess`` like every candidate, under its own reason (a yield-ledger signal of its own).
Off unless ``PolicyConfig.successor_contexts`` > 0 (the tracker keeps no contexts then).
"""

from __future__ import annotations

from .action_payload import ActionPayload
from .actions import REASON_SUCCESSOR_CONTEXT
from .agents import Agent, agent_id_for
from .candidates import Candidate
from .config import PolicyConfig
from .plan_filters import Deferred, Gate
from .plan_piece import PER_SESSION, SOURCE, Piece
from .plan_tick import Tick
from .sessions import AgentContext, Session


def context_candidate(
    ctx: Session | AgentContext,
    tenant: str,
    p: float,
    reason: str,
    *,
    lead: float | None,
    warm_ok: bool,
    session: tuple[str, str],
    soon: bool = False,
) -> Candidate:
    """A session's context (its latest prompt, or an agent's latest prompt in it) as a candidate,
    scored by P x its tokens: what the tool resume, the session sweep and the successor contexts
    offer, one construction for all three."""
    return Candidate(
        score=p * sum(ctx.block_tokens),
        reason=reason,
        tenant=tenant,
        anchor_id=agent_id_for(tenant, ctx.hashes[-1]),
        hashes=ctx.hashes,
        block_tokens=ctx.block_tokens,
        payload=ActionPayload(ctx.context_payload, ctx.assistant_payload),
        prob=p,
        lead=lead,
        warm_ok=warm_ok,
        context=True,
        session=session,
        soon=soon,
    )


class SuccessorContexts(Piece):
    """A session paused after a plain stop: its predicted next agents' contexts in it (reason
    ``successor_context``, a session context: ``context=True``)."""

    name = "successor_contexts"
    kind = SOURCE
    cadence = PER_SESSION
    reasons = (REASON_SUCCESSOR_CONTEXT,)
    settings = ("successor_contexts", "top_k", "tau", "warm_top_k", "min_lead_s")

    @classmethod
    def idle(cls, cfg: PolicyConfig) -> bool:
        return cfg.successor_contexts <= 0  # the tracker keeps no contexts then

    def begin(self, t: Tick) -> None:
        pass

    def session(self, t: Tick, s: Session, agent: Agent, paused: bool, lead: float | None) -> None:
        """``paused``: the session's response ended (``lead``: its agent's usual pause left);
        else its request still runs, and the context is offered now only when that pause is too
        short for a warm after the response ends (the same deferral as ``Successors``)."""
        cfg = t.cfg
        if cfg.successor_contexts <= 0 or (paused and s.finish == "tool_calls"):
            return
        tenant = agent.tenant
        if not t.gate(tenant):
            t.drop(Gate.name, "gate_closed", self.name, REASON_SUCCESSOR_CONTEXT, agent.agent_id, tenant)
            return
        ts = t.registry.tenant(tenant)
        gap = agent.gap_median
        for rank, (slot, p) in enumerate(ts.learner.successors(agent.slot, cfg.top_k, cfg.tau)):
            if rank >= cfg.warm_top_k:
                break
            nxt = ts.by_slot.get(slot)
            if nxt is None or nxt is agent:
                continue  # the same agent going on: the session's own context (session_sweep's)
            c = t.sessions.context_for(s, nxt)
            if c is None or len(c.hashes) <= len(nxt.anchor_hashes):
                continue  # nothing beyond the anchor (Successors keeps that)
            aid = agent_id_for(tenant, c.hashes[-1])
            if not paused and gap is not None and t.defers(gap, cfg.reload_s(sum(c.block_tokens) - nxt.tokens)):
                t.drop(Deferred.name, "deferred", self.name, REASON_SUCCESSOR_CONTEXT, aid, tenant, p)
                continue  # planned again when the response ends
            cand = context_candidate(
                c, tenant, p, REASON_SUCCESSOR_CONTEXT, lead=lead, warm_ok=True, session=s.key, soon=not paused
            )
            cand.source = self.name
            t.out.append(cand)
