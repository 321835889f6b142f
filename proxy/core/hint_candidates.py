"""The planner's candidates from live hint plans and pins (a part of ``HintDriver.candidates``,
apart to keep modules small). Pure: explicit ``now``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .action_payload import ActionPayload
from .actions import REASON_FANOUT, REASON_SWEEP, REASON_TOOL_RESUME, REASON_TRANSITION
from .agents import agent_id_for
from .hints import FANOUT, NEXT_AGENT, HintCandidate

if TYPE_CHECKING:
    from .hint_actions import HintDriver

PIN_REFRESH_S = 1.0  # a pin is offered to the planner at most this often


def plan_candidates(d: HintDriver, now: float, out: list[HintCandidate]) -> None:
    d._anchor_plan.clear()
    sessions = d.policy.sessions.sessions
    by_id = d.policy.agents.by_id
    stale = []
    for key, plan in d.plans.items():
        s = sessions.get(key)
        if plan.until < now or s is None:
            stale.append(key)
            continue
        if plan.kind == NEXT_AGENT:
            a = by_id.get(plan.agent_id) if plan.agent_id is not None else None
            if a is None or a.payload is None or not a.anchor_hashes:
                stale.append(key)
                continue
            d._anchor_plan[a.agent_id] = plan
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
        d._anchor_plan[aid] = plan
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
        d.plans.pop(key)


def pin_candidates(d: HintDriver, now: float, out: list[HintCandidate]) -> None:
    pol = d.policy
    cap = pol.residency.capacity_tokens * d.cfg.directive_cache_share
    used = 0.0
    stale = []
    for slot, pin in d.pins.items():
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
                tokens, REASON_SWEEP, tenant, aid, hashes, toks, payload, 1.0, None, True, ctx, pin.kind, pin.source
            )
        )
    for slot in stale:
        d.pins.pop(slot)
