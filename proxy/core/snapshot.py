"""Versioned, bounded snapshot of the learned state (agents' identities, transitions, gaps).

Only what was *learned* is saved: agent keys and anchor lengths in blocks (the prefix index's
agents: a restored agent gets its index node back when a request's chain has its key at that
depth, so ids survive a restart), use counts, decayed transition counts and gap
samples. Anchor hashes and payloads (prompt text) are not: they are large and private, and the
next request from an agent refills them. Sessions and the residency shadow are transient and are
not saved either. JSON-safe dicts; hashes as 16-hex strings; numbers rounded.

Tenants never appear as their ``cache_salt``: a salted tenant is saved as ``salt:<n>c#<digest>``
(length plus a one-way xxh3 digest, the same exposure as the agent keys, which are chained hashes
seeded by the salt). Restored salted tenants stay dormant until a request of the tenant whose
digest matches arrives (``ScoutPolicy`` adopts them then); the unsalted tenant loads at once.

Size: ``dump`` keeps the most valuable agents (uses decayed by age) that fit ``max_bytes`` with
their transitions; ``load`` refuses a larger document. Validation is strict and all-or-nothing:
every number is bounded (slots below ``max_agents``, finite non-negative counts, gap lists no
longer than ``gap_samples``), ids and keys are well-formed and unique, and nothing is applied
unless the whole document passed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import xxhash

from .agents import AgentRegistry
from .config import PolicyConfig
from .survival import median_gap

VERSION = 3
ACCEPTED_VERSIONS = (1, 2, 3)  # v1/v2 keyed tenants by the raw salt (v1: no anchor length); still readable
MAX_ANCHOR_BLOCKS = 1_000_000  # bound on a saved anchor length (blocks)
KIND = "cachescout-policy"
MAX_COUNT = 1e15  # bound on every saved count (uses, steps, transition counts)
MAX_TIME = 1e12  # bound on saved clock readings and gaps (seconds)
_HEX = frozenset("0123456789abcdef")


def _r(x: float) -> float:
    return float(f"{x:.4g}")


def tenant_tag(tenant: str) -> str:
    """How a tenant is written outside the engine call: '' or 'salt:<n>c' (never the salt)."""
    return f"salt:{len(tenant)}c" if tenant else ""


def tenant_key(tenant: str) -> str:
    """A tenant's key in the state file: its tag plus a one-way digest, so it can be matched again."""
    if not tenant:
        return ""
    digest = xxhash.xxh3_64_hexdigest(b"cachescout/tenant|" + tenant.encode("utf-8", "surrogatepass"))
    return f"{tenant_tag(tenant)}#{digest}"


@dataclass(frozen=True, slots=True)
class SavedAgent:
    agent_id: str
    key: int
    slot: int
    tokens: int
    uses: int
    last_seen: float
    gaps: tuple[float, ...]
    tool_gaps: tuple[float, ...]
    anchor_len: int = 0  # blocks in the anchor (0: unknown, v1 files)


@dataclass(frozen=True, slots=True)
class SavedTenant:
    agents: tuple[SavedAgent, ...]
    transitions: tuple[tuple[int, int, float], ...]
    visits: tuple[tuple[int, float], ...] | None
    steps: int
    predictions: int
    hits: int


# --- dump ------------------------------------------------------------------------------------------
def _tenant_doc(t: SavedTenant) -> dict[str, Any]:
    return {
        "agents": [
            [
                a.agent_id,
                f"{a.key:016x}",
                a.slot,
                a.tokens,
                a.uses,
                _r(a.last_seen),
                [_r(g) for g in a.gaps],
                [_r(g) for g in a.tool_gaps],
                a.anchor_len,
            ]
            for a in t.agents
        ],
        "transitions": [[i, j, c] for i, j, c in t.transitions],
        "visits": None if t.visits is None else [[i, v] for i, v in t.visits],
        "steps": t.steps,
        "predictions": t.predictions,
        "hits": t.hits,
    }


def saved_tenants(registry: AgentRegistry) -> dict[str, SavedTenant]:
    """The registry's learned state by tenant key (see ``tenant_key``)."""
    out: dict[str, SavedTenant] = {}
    for name, ts in registry.tenants.items():
        if not ts.agents:
            continue
        agents = tuple(
            SavedAgent(
                a.agent_id,
                a.key,
                a.slot,
                a.tokens,
                a.uses,
                a.last_seen,
                tuple(a.gaps),
                tuple(a.tool_gaps),
                a.anchor_len,
            )
            for a in sorted(ts.agents.values(), key=lambda a: a.slot)
        )
        learner = ts.learner
        out[tenant_key(name)] = SavedTenant(
            agents,
            tuple((int(i), int(j), float(c)) for i, j, c in learner.export_counts()),
            tuple((int(i), float(v)) for i, v in learner.export_visits()),
            learner.steps,
            learner.predictions,
            learner.hits,
        )
    return out


def dump(
    registry: AgentRegistry,
    dormant: dict[str, SavedTenant] | None = None,
    max_bytes: int | None = None,
    age_lambda: float = 0.005,
) -> dict[str, object]:
    """The document to save: live tenants plus restored-but-not-yet-seen ones, trimmed to the most
    valuable agents that fit ``max_bytes`` (None = no limit)."""
    tenants = {**(dormant or {}), **saved_tenants(registry)}

    def doc() -> dict[str, object]:
        return {
            "kind": KIND,
            "version": VERSION,
            "tenants": {k: _tenant_doc(t) for k, t in tenants.items() if t.agents},
        }

    out = doc()
    if max_bytes is None:
        return out
    while len(json.dumps(out, separators=(",", ":"))) > max_bytes and any(t.agents for t in tenants.values()):
        latest = max(a.last_seen for t in tenants.values() for a in t.agents)
        ranked = sorted(
            (
                (a.uses * math.exp(-age_lambda * max(0.0, latest - a.last_seen)), k, a.slot)
                for k, t in tenants.items()
                for a in t.agents
            )
        )
        drop = {(k, slot) for _, k, slot in ranked[: max(1, len(ranked) // 8)]}
        tenants = {k: _without(t, {s for kk, s in drop if kk == k}) for k, t in tenants.items()}
        out = doc()
    return out


def _without(t: SavedTenant, slots: set[int]) -> SavedTenant:
    if not slots:
        return t
    return SavedTenant(
        tuple(a for a in t.agents if a.slot not in slots),
        tuple(x for x in t.transitions if x[0] not in slots and x[1] not in slots),
        None if t.visits is None else tuple(v for v in t.visits if v[0] not in slots),
        t.steps,
        t.predictions,
        t.hits,
    )


# --- load ------------------------------------------------------------------------------------------
def _num(v: Any, what: str, lo: float, hi: float, integer: bool = False) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{what}: not a number")
    if not math.isfinite(v) or not lo <= v <= hi:
        raise ValueError(f"{what}: {v!r} outside [{lo:g}, {hi:g}]")
    if integer:
        if int(v) != v:
            raise ValueError(f"{what}: not an integer")
        return int(v)
    return float(v)


def _list(v: Any, what: str, limit: int) -> list[Any]:
    if not isinstance(v, list):
        raise ValueError(f"{what}: not a list")
    if len(v) > limit:
        raise ValueError(f"{what}: {len(v)} entries, limit {limit}")
    return v


def _parse_tenant(name: str, t: Any, cfg: PolicyConfig, fields: int = 9) -> SavedTenant:
    if not isinstance(t, dict):
        raise ValueError(f"tenant {tenant_tag(name)!r}: not an object")
    max_slot = cfg.max_agents - 1
    agents: list[SavedAgent] = []
    seen_ids: set[str] = set()
    seen_keys: set[int] = set()
    seen_slots: set[int] = set()
    for row in _list(t.get("agents", []), "agents", cfg.max_agents):
        row = _list(row, "agent", fields)
        if len(row) != fields:
            raise ValueError(f"agent: want {fields} fields")
        agent_id, key_hex, slot, tokens, uses, last_seen, gaps, tool_gaps = row[:8]
        depth = _num(row[8], "anchor length", 0, MAX_ANCHOR_BLOCKS, integer=True) if fields > 8 else 0
        if not (isinstance(agent_id, str) and 1 <= len(agent_id) <= 16 and set(agent_id) <= _HEX):
            raise ValueError("agent id: not a short hex string")
        if not (isinstance(key_hex, str) and 1 <= len(key_hex) <= 16 and set(key_hex) <= _HEX):
            raise ValueError("agent key: not a 64-bit hex string")
        key = int(key_hex, 16)
        slot = _num(slot, "slot", 0, max_slot, integer=True)
        if agent_id in seen_ids or key in seen_keys or slot in seen_slots:
            raise ValueError("duplicate agent id, key or slot")
        seen_ids.add(agent_id)
        seen_keys.add(key)
        seen_slots.add(slot)
        agents.append(
            SavedAgent(
                agent_id,
                key,
                slot,
                _num(tokens, "tokens", 0, 1e9, integer=True),
                _num(uses, "uses", 0, MAX_COUNT, integer=True),
                _num(last_seen, "last_seen", -MAX_TIME, MAX_TIME),
                tuple(_num(g, "gap", 0, MAX_TIME) for g in _list(gaps, "gaps", cfg.gap_samples)),
                tuple(_num(g, "gap", 0, MAX_TIME) for g in _list(tool_gaps, "tool_gaps", cfg.gap_samples)),
                depth,
            )
        )
    limit = max(1, len(seen_slots)) ** 2
    transitions = []
    for tr in _list(t.get("transitions", []), "transitions", limit):
        tr = _list(tr, "transition", 3)
        if len(tr) != 3:
            raise ValueError("transition: want [i, j, count]")
        i = _num(tr[0], "transition slot", 0, max_slot, integer=True)
        j = _num(tr[1], "transition slot", 0, max_slot, integer=True)
        if i not in seen_slots or j not in seen_slots:
            raise ValueError("transition between unknown slots")
        transitions.append((i, j, _num(tr[2], "transition count", 0, MAX_COUNT)))
    visits = None
    if t.get("visits") is not None:
        visits = []
        for v in _list(t["visits"], "visits", len(seen_slots)):
            v = _list(v, "visit", 2)
            if len(v) != 2:
                raise ValueError("visit: want [slot, count]")
            i = _num(v[0], "visit slot", 0, max_slot, integer=True)
            if i not in seen_slots:
                raise ValueError("visit of an unknown slot")
            visits.append((i, _num(v[1], "visit count", 0, MAX_COUNT)))
    return SavedTenant(
        tuple(agents),
        tuple(transitions),
        None if visits is None else tuple(visits),
        _num(t.get("steps", 0), "steps", 0, MAX_COUNT, integer=True),
        _num(t.get("predictions", 0), "predictions", 0, MAX_COUNT, integer=True),
        _num(t.get("hits", 0), "hits", 0, MAX_COUNT, integer=True),
    )


def parse(data: object, cfg: PolicyConfig) -> dict[str, SavedTenant]:
    """Validate a whole document; raises ValueError (nothing applied) on anything out of bounds."""
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise ValueError("not a cachescout policy snapshot")
    version = data.get("version")
    if version not in ACCEPTED_VERSIONS:
        raise ValueError(f"unsupported snapshot version {version!r} (want {VERSION})")
    size = len(json.dumps(data, separators=(",", ":")))
    if size > cfg.snapshot_max_bytes:
        raise ValueError(f"snapshot is {size} bytes, limit {cfg.snapshot_max_bytes}")
    tenants = data.get("tenants", {})
    if not isinstance(tenants, dict):
        raise ValueError("tenants: not an object")
    out: dict[str, SavedTenant] = {}
    for name, t in tenants.items():
        if not isinstance(name, str):
            raise ValueError("tenant name: not a string")
        key = tenant_key(name) if version != VERSION else name  # older files: raw salts
        if version == VERSION and key and not key.startswith("salt:"):
            raise ValueError("tenant key: not a salt tag")
        out[key] = _parse_tenant(name if version != VERSION else "", t, cfg, 8 if version == 1 else 9)
    if sum(len(t.agents) for t in out.values()) > cfg.max_agents:
        raise ValueError(f"more than max_agents={cfg.max_agents} agents")
    return out


def apply_tenant(registry: AgentRegistry, name: str, t: SavedTenant) -> None:
    """Install one validated tenant's learned state under its real name ``name``."""
    ts = registry.tenant(name)
    for a in t.agents:
        agent = registry._create(ts, a.key, a.last_seen, agent_id=a.agent_id, slot=a.slot)
        agent.tokens = a.tokens
        agent.uses = a.uses
        agent.gaps.extend(a.gaps)
        agent.tool_gaps.extend(a.tool_gaps)
        agent.gap_median = median_gap(agent.gaps)
        agent.tool_gap_median = median_gap(agent.tool_gaps)
        agent.anchor_len = a.anchor_len
        if a.anchor_len > 0:  # the prefix index gives it its node back when its key recurs at that depth
            ts.restored.setdefault(a.anchor_len, {})[a.key] = agent
            registry.restored_pending += 1
    used = set(ts.by_slot)
    ts.free_slots = [s for s in range(ts.next_slot) if s not in used]
    ts.learner.import_counts(
        [list(x) for x in t.transitions], None if t.visits is None else [list(v) for v in t.visits]
    )
    ts.learner.steps = t.steps
    ts.learner.predictions = t.predictions
    ts.learner.hits = t.hits


def load(registry: AgentRegistry, data: object, cfg: PolicyConfig) -> dict[str, SavedTenant]:
    """Replace the registry's learned state with ``data`` (all or nothing; ValueError if not ours
    or out of bounds). Returns the salted tenants, to be adopted when their traffic comes back."""
    parsed = parse(data, cfg)
    for agent in list(registry.by_id.values()):
        registry.remove(agent)
    registry.tenants.clear()
    unsalted = parsed.pop("", None)
    if unsalted is not None:
        apply_tenant(registry, "", unsalted)
    return parsed
