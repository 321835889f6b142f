"""The survival sweep's registry walk: which agents are within ``max_hops`` of a live session's
current agent, and their p_surv (survival.py holds the math; this walk reads the agent registry,
which is why it is not in survival.py: agents -> survival stays one-way, no import cycle)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from .agents import Agent, AgentRegistry
from .survival import hop_distances, p_surv


def reachable_agents(
    registry: AgentRegistry,
    on_agent: Iterable[tuple[str, int]],
    max_hops: int,
    tau: float,
    admit: Callable[[str], bool] | None = None,
) -> Iterator[tuple[Agent, float]]:
    """(agent, p_surv) for every agent within ``max_hops`` of a live session's current agent, per
    tenant (``on_agent``: (tenant, slot) of each session's current agent); ``admit`` filters tenants
    (the planner's gate). The one survival BFS: the planner's sweep and the replay's in-engine
    policy both read it."""
    sources: dict[str, list[int]] = {}
    for tenant, slot in on_agent:
        sources.setdefault(tenant, []).append(slot)
    for tenant, srcs in sources.items():
        if admit is not None and not admit(tenant):
            continue
        ts = registry.tenant(tenant)
        for slot, hops in hop_distances(ts.learner, srcs, max_hops, tau).items():
            a = ts.by_slot.get(slot)
            if a is not None:
                yield a, p_surv(hops, max_hops)
