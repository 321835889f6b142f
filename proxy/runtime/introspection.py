"""What `/debug/state` shows of the learned policy: agents, top transitions, plain-data stats.

Why apart from `live.py`: this is read-only reporting over the core's state (no engine, no
lifecycle), and it must never show prompt text or a tenant's salt — only short ids, counts and
probabilities. `LiveRuntime.debug_state` assembles it with the executor's and observer's figures.
"""

from __future__ import annotations

import dataclasses
from typing import TypedDict

from proxy.core.policy import ScoutPolicy


class AgentRow(TypedDict):
    id: str  # short agent id
    tenant: str  # "salt:<length>c", never the salt
    tokens: int
    uses: int
    last_seen_s_ago: float
    tool_gaps: int  # tool-pause samples kept (response ending in tool_calls -> the session's next request)
    tool_gap_median_s: float | None  # their median: the predicted length of this agent's tool pauses


# agent -> agent with its probability and decayed count ("from" is a keyword: functional syntax)
TransitionRow = TypedDict("TransitionRow", {"from": str, "to": str, "p": float, "count": float})


def describe_policy(policy: ScoutPolicy, now: float, top: int = 20) -> dict[str, object]:
    """Agents (short id, tokens, uses, last seen) and top transitions per tenant; no prompt text."""
    agents: list[AgentRow] = []
    transitions: list[TransitionRow] = []
    for tenant, ts in policy.agents.tenants.items():
        tenant_tag = "" if not tenant else f"salt:{len(tenant)}c"  # never the salt itself
        for a in ts.agents.values():
            agents.append(
                {
                    "id": a.agent_id,
                    "tenant": tenant_tag,
                    "tokens": a.tokens,
                    "uses": a.uses,
                    "last_seen_s_ago": round(now - a.last_seen, 3),
                    "tool_gaps": len(a.tool_gaps),
                    "tool_gap_median_s": None if a.tool_gap_median is None else round(a.tool_gap_median, 3),
                }
            )
        learner = ts.learner
        for i, src in ts.by_slot.items():
            for j, p in learner.successors(i, 3, 0.0):
                dst = ts.by_slot.get(j)
                if dst is not None:
                    transitions.append(
                        {
                            "from": src.agent_id,
                            "to": dst.agent_id,
                            "p": round(p, 3),
                            "count": round(learner.count(i, j), 2),
                        }
                    )
    agents.sort(key=lambda a: -a["uses"])
    transitions.sort(key=lambda t: -t["count"])
    return {"agents": agents[:100], "top_transitions": transitions[:top], "sessions": len(policy.sessions)}


def plain_data(obj: object) -> object:
    """A dataclass (nested dicts, lists, tuples) as plain JSON-ready data."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain_data(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): plain_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain_data(v) for v in obj]
    return obj
