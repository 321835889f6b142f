"""Agent identity: an agent is a recurring fixed context (model + tools + system prompt).

For chat views the fingerprint module marks the anchor (``anchor_blocks``). For raw prompts and
engine block ids (``anchor_blocks == 0``) the registry learns, per tenant, how many leading blocks
every request shares (chat-template boilerplate, a common system block) and skips them, like the
paper's fork (SKIP blocks, then N fingerprint blocks). Because hashes are chained, the hash of the
anchor's last block identifies the whole anchor, so that one int is the agent's key.

The registry is bounded (``max_agents`` over all tenants); when full, the agent with the lowest
value uses·e^(−λ·age) is evicted and its transition row/column are forgotten.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import xxhash

from .config import PolicyConfig
from .fingerprint import truncate_payload
from .survival import median_gap
from .transitions import TransitionLearner
from .view import RequestView


@dataclass(slots=True, eq=False)
class Agent:
    agent_id: str
    tenant: str
    key: int
    slot: int
    anchor_hashes: tuple[int, ...] = ()
    anchor_block_tokens: tuple[int, ...] = ()
    tokens: int = 0
    payload: Any = None
    uses: int = 0
    last_seen: float = 0.0
    gaps: deque = field(default_factory=deque)        # response end -> next request (other finishes)
    tool_gaps: deque = field(default_factory=deque)   # same, after finish_reason == "tool_calls"
    gap_median: float | None = None                   # medians, kept current by record_gap
    tool_gap_median: float | None = None
    forgotten: bool = False                           # evicted (sessions drop it lazily)


def agent_id_for(tenant: str, key: int) -> str:
    return f"{xxhash.xxh3_64_intdigest(tenant.encode('utf-8', 'surrogatepass') + key.to_bytes(8, 'little')):016x}"[:12]


class TenantState:
    """One tenant's agents, learned skip and transition chain."""

    def __init__(self, tenant: str, config: PolicyConfig) -> None:
        self.tenant = tenant
        self.agents: dict[int, Agent] = {}          # key -> agent
        self.by_slot: dict[int, Agent] = {}
        self.free_slots: list[int] = []
        self.next_slot = 0
        self.common: tuple[int, ...] | None = None  # longest prefix shared by every raw-prompt request
        self.seen_raw = 0
        self.max_anchor_tokens = 0                  # largest anchor seen (bounds any warm's size)
        self.learner = TransitionLearner(config.epsilon, config.decay_half_life, config.r_refresh_steps)

    @property
    def skip(self) -> int:
        return len(self.common) if self.common is not None and self.seen_raw >= 2 else 0

    def learn_skip(self, hashes: tuple[int, ...], cap: int) -> None:
        self.seen_raw += 1
        if self.common is None:
            self.common = hashes[:cap]
            return
        common = self.common
        n = min(len(common), len(hashes))
        k = 0
        while k < n and common[k] == hashes[k]:
            k += 1
        if k < len(common):
            self.common = common[:k]

    def alloc_slot(self) -> int:
        if self.free_slots:
            return self.free_slots.pop()
        self.next_slot += 1
        return self.next_slot - 1


class AgentRegistry:
    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self.tenants: dict[str, TenantState] = {}
        self.by_id: dict[str, Agent] = {}
        self.evictions = 0
        self.on_evict = None          # callable(Agent): lets the session tracker drop references

    def tenant(self, tenant: str) -> TenantState:
        ts = self.tenants.get(tenant)
        if ts is None:
            ts = self.tenants[tenant] = TenantState(tenant, self.config)
        return ts

    def __len__(self) -> int:
        return len(self.by_id)

    def anchor_length(self, view: RequestView, ts: TenantState) -> int:
        if view.anchor_blocks > 0:
            return view.anchor_blocks
        cfg = self.config
        return min(len(view.block_hashes), min(ts.skip, cfg.max_skip_blocks) + cfg.fingerprint_blocks)

    def identify(self, view: RequestView, now: float) -> Agent | None:
        """The agent that sent ``view`` (created on first sight); None when it has no blocks."""
        if not view.block_hashes:
            return None
        ts = self.tenant(view.tenant)
        if view.anchor_blocks <= 0:
            ts.learn_skip(view.block_hashes, self.config.max_skip_blocks + 1)
        n = self.anchor_length(view, ts)
        if n <= 0:
            return None
        key = view.block_hashes[n - 1]
        agent = ts.agents.get(key)
        if agent is None:
            agent = self._create(ts, key, now)
        if len(agent.anchor_hashes) != n:
            agent.anchor_hashes = view.block_hashes[:n]
            agent.anchor_block_tokens = view.block_tokens[:n]
            agent.tokens = sum(agent.anchor_block_tokens)
            if agent.tokens > ts.max_anchor_tokens:
                ts.max_anchor_tokens = agent.tokens
        if view.anchor_payload is not None and (agent.payload is None or view.anchor_blocks <= 0):
            agent.payload = view.anchor_payload if view.anchor_blocks > 0 else truncate_payload(view.anchor_payload, n)
        agent.uses += 1
        agent.last_seen = now
        return agent

    def _create(self, ts: TenantState, key: int, now: float, agent_id: str | None = None,
                slot: int | None = None) -> Agent:
        if len(self.by_id) >= self.config.max_agents:
            self._evict_one(now)
            self.tenants.setdefault(ts.tenant, ts)   # its last agent may just have gone
        if slot is None:
            slot = ts.alloc_slot()
        else:
            ts.next_slot = max(ts.next_slot, slot + 1)
        n = self.config.gap_samples
        agent = Agent(agent_id or agent_id_for(ts.tenant, key), ts.tenant, key, slot,
                      gaps=deque(maxlen=n), tool_gaps=deque(maxlen=n), last_seen=now)
        ts.agents[key] = agent
        ts.by_slot[slot] = agent
        ts.learner.add_slot(slot)
        self.by_id[agent.agent_id] = agent
        return agent

    def _evict_one(self, now: float) -> None:
        """Make room: evicts the least valuable ~1/16 of the registry at once (at least one), so
        the O(agents) ranking is paid once per max_agents/16 creations, not on every new agent
        (agent-less traces create one per request)."""
        lam = self.config.age_lambda
        batch = max(1, len(self.by_id) // 16)
        ranked = sorted(self.by_id.values(), key=lambda a: a.uses * math.exp(-lam * max(0.0, now - a.last_seen)))
        for victim in ranked[:batch]:
            self.remove(victim)

    def remove(self, agent: Agent) -> None:
        ts = self.tenants[agent.tenant]
        ts.agents.pop(agent.key, None)
        ts.by_slot.pop(agent.slot, None)
        ts.learner.remove_slot(agent.slot)
        ts.free_slots.append(agent.slot)
        self.by_id.pop(agent.agent_id, None)
        self.evictions += 1
        if not ts.agents:
            del self.tenants[agent.tenant]      # bounded tenants too (salts can be per user)
        if self.on_evict is not None:
            self.on_evict(agent)

    def alive(self, agent: Agent) -> bool:
        return self.by_id.get(agent.agent_id) is agent

    def record_gap(self, agent: Agent, gap: float, finish: str | None) -> None:
        if gap < 0:
            return
        if finish == "tool_calls":
            agent.tool_gaps.append(gap)
            agent.tool_gap_median = median_gap(agent.tool_gaps)
        else:
            agent.gaps.append(gap)
            agent.gap_median = median_gap(agent.gaps)
