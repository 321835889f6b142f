"""Versioned, bounded snapshot of the learned state (agents' identities, transitions, gaps).

Only what was *learned* is saved: agent keys and anchor lengths in blocks (the prefix index's
agents: a restored agent gets its index node back when a request's chain has its key at that
depth, so ids survive a restart), use counts, decayed transition counts and gap
samples. Anchor hashes and payloads (prompt text) are not: they are large and private, and the
next request from an agent refills them. Sessions and the residency shadow are transient and are
not saved either. JSON-safe dicts; hashes as 16-hex strings; numbers rounded.
"""

from __future__ import annotations

import json
from typing import Any

from .agents import AgentRegistry
from .survival import median_gap

VERSION = 2
KIND = "cachescout-policy"


def _r(x: float) -> float:
    return float(f"{x:.4g}")


def dump(registry: AgentRegistry) -> dict[str, Any]:
    tenants = {}
    for name, ts in registry.tenants.items():
        if not ts.agents:
            continue
        agents = [[a.agent_id, f"{a.key:016x}", a.slot, a.tokens, a.uses, _r(a.last_seen),
                   [_r(g) for g in a.gaps], [_r(g) for g in a.tool_gaps], a.anchor_len]
                  for a in sorted(ts.agents.values(), key=lambda a: a.slot)]
        learner = ts.learner
        tenants[name] = {
            "agents": agents,
            "transitions": learner.export_counts(),
            "visits": learner.export_visits(),
            "steps": learner.steps,
            "predictions": learner.predictions,
            "hits": learner.hits,
        }
    return {"kind": KIND, "version": VERSION, "tenants": tenants}


def load(registry: AgentRegistry, data: dict[str, Any], max_bytes: int) -> None:
    """Replace the registry's learned state with ``data``; raises ValueError if it is not ours."""
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise ValueError("not a cachescout policy snapshot")
    if data.get("version") != VERSION:
        raise ValueError(f"unsupported snapshot version {data.get('version')!r} (want {VERSION})")
    size = len(json.dumps(data, separators=(",", ":")))
    if size > max_bytes:
        raise ValueError(f"snapshot is {size} bytes, limit {max_bytes}")
    for agent in list(registry.by_id.values()):
        registry.remove(agent)
    registry.tenants.clear()
    for name, t in data.get("tenants", {}).items():
        ts = registry.tenant(str(name))
        for agent_id, key_hex, slot, tokens, uses, last_seen, gaps, tool_gaps, depth in t.get("agents", []):
            a = registry._create(ts, int(key_hex, 16), float(last_seen), agent_id=str(agent_id), slot=int(slot))
            a.anchor_len = int(depth)
            if a.anchor_len > 0:
                ts.restored.setdefault(a.anchor_len, {})[a.key] = a
                registry.restored_pending += 1
            a.tokens = int(tokens)
            a.uses = int(uses)
            a.gaps.extend(float(g) for g in gaps)
            a.tool_gaps.extend(float(g) for g in tool_gaps)
            a.gap_median = median_gap(a.gaps)
            a.tool_gap_median = median_gap(a.tool_gaps)
        used = set(ts.by_slot)
        ts.free_slots = [s for s in range(ts.next_slot) if s not in used]
        ts.learner.import_counts(t.get("transitions", []), t.get("visits"))
        ts.learner.steps = int(t.get("steps", 0))
        ts.learner.predictions = int(t.get("predictions", 0))
        ts.learner.hits = int(t.get("hits", 0))
