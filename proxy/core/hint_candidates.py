"""The planner's candidates from live hint plans and pins (a part of ``HintDriver.candidates``,
apart to keep modules small), and what the driver needs of its host. Pure: explicit ``now``.

Why the ``HintHost`` protocol: the driver is a candidate source that reads agents and sessions
(and parks nothing but its own plans); it is handed the object that holds them (``ScoutPolicy``)
without importing it, so hint_actions -> policy -> planner is no import cycle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .action_payload import ActionPayload
from .actions import REASON_FANOUT, REASON_SWEEP, REASON_TOOL_RESUME, REASON_TRANSITION
from .agents import AgentRegistry, agent_id_for
from .candidates import FanoutParent, RuntimeHints
from .hint_scope import SessionKey
from .hint_tables import ByteLRU
from .hints import FANOUT, NEXT_AGENT, HintCandidate
from .residency import ResidencyShadow
from .sessions import SessionTracker

PIN_REFRESH_S = 1.0  # a pin is offered to the planner at most this often


class PlannerHooks(Protocol):
    """The planner's tables the driver attaches to and releases from (``Planner`` is one)."""

    hints: RuntimeHints | None
    dirty: dict[tuple[str, str], None]
    fanout: dict[tuple[str, str], FanoutParent]


class HintHost(Protocol):
    """What the driver reads: the agents, the sessions, the cache shadow, the planner's hooks
    (``ScoutPolicy`` is one; read as attributes, so a restored policy's new tables are seen)."""

    @property
    def agents(self) -> AgentRegistry: ...

    @property
    def sessions(self) -> SessionTracker: ...

    @property
    def residency(self) -> ResidencyShadow: ...

    @property
    def planner(self) -> PlannerHooks: ...


@dataclass(slots=True)
class HintPlan:
    """A live hint's plan (one per session, or one pin)."""

    kind: str
    source: str
    weight: float  # standing-weighted probability
    expected_at: float | None = None  # trusted predicted arrival (lead time)
    agent_id: str | None = None  # next_agent / pin on an agent
    until: float = float("inf")
    last_offered: float = float("-inf")
    warms_left: int = 1  # a hint pays for one warm; then touch/retain only


def plan_candidates(
    plans: ByteLRU[SessionKey, HintPlan],
    anchor_plan: dict[str, HintPlan],
    host: HintHost,
    now: float,
    out: list[HintCandidate],
) -> None:
    anchor_plan.clear()
    sessions = host.sessions.sessions
    by_id = host.agents.by_id
    stale = []
    for key, plan in plans.items():
        s = sessions.get(key)
        if plan.until < now or s is None:
            stale.append(key)
            continue
        if plan.kind == NEXT_AGENT:
            a = by_id.get(plan.agent_id) if plan.agent_id is not None else None
            if a is None or a.payload is None or not a.anchor_hashes:
                stale.append(key)
                continue
            anchor_plan[a.agent_id] = plan
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
        anchor_plan[aid] = plan
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
        plans.pop(key)


def pin_candidates(
    pins: ByteLRU[tuple[str, Any], HintPlan], host: HintHost, share: float, now: float, out: list[HintCandidate]
) -> None:
    pol = host
    cap = pol.residency.capacity_tokens * share
    used = 0.0
    stale = []
    for slot, pin in pins.items():
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
        pins.pop(slot)
