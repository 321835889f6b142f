"""Agent identity: an agent is the prefix its calls re-send, wherever it ends.

Discovery is the prefix index's (``prefix_index.py``: the deepest prefix that requests from
several distinct sources reach and branch after, or end at; its docstring has the rules, the
stability rule and what block granularity does to early variables). This registry gives each
promoted node an ``Agent``: a stable id (a function of tenant and the node's last hash), a slot
in the tenant's transition chain, the anchor (exactly the recurring blocks, so touches and warms
cover what is reused and nothing of the variable tail) and the payload that rebuilds those
tokens. Requests that reach no agent yet (first calls, one-off prompts) have none: they are
forwarded and shadowed, but not learned as transitions.

The same code path serves the live proxy (canonical chat/Responses/Messages views) and the replay
(engine block ids): both hand chained hashes to ``identify``.

The registry is bounded (``max_agents`` over all tenants); when full, the agent with the lowest
value uses·e^(−λ·age) is evicted and its transition row/column are forgotten. It is also bounded
in bytes (issue 22): each agent is charged its anchor (hash and block-token tuples) and its replay
payload (``agent_bytes``); over ``agents_max_bytes``, or when the prefix index is over its budget
and only agent nodes are left to evict, the least valuable agents go first (the agent just
identified last; alone over the budget, it goes too: counted in ``dropped_for_bytes``).
"""

from __future__ import annotations

import math
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import xxhash

from .action_payload import ActionPayload
from .config import PolicyConfig
from .fingerprint import truncate_payload
from .prefix_index import PrefixIndex
from .prefix_node import HASH_BYTES, Node
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
    payload: ActionPayload | None = None  # rebuilds the anchor (None: not replayable)
    uses: int = 0
    last_seen: float = 0.0
    gaps: deque[float] = field(default_factory=deque)  # response end -> next request (other finishes)
    tool_gaps: deque[float] = field(default_factory=deque)  # same, after finish_reason == "tool_calls"
    gap_median: float | None = None  # medians, kept current by record_gap
    tool_gap_median: float | None = None
    forgotten: bool = False  # evicted (sessions drop it lazily)
    node: Node | None = None  # its prefix-index node (None: restored, not yet seen)
    repeats: int = 0  # requests that were whole-prompt repeats
    anchor_len: int = 0  # blocks in the anchor (known before its hashes on restore)
    cost: int = 0  # bytes charged to the registry's budget (agent_bytes when last measured)


AGENT_BYTES = 1200  # the Agent object, its two gap deques and its dict/slot entries (tracemalloc)


def anchor_payload_bytes(obj: object, depth: int = 0) -> int:
    """Bytes a replay payload holds: its strings (exact sizes) and containers (~64 B each + slots);
    compact payloads declare their ``nbytes``. Walked only when an agent's payload changes."""
    n = getattr(obj, "nbytes", None)
    if isinstance(n, int):
        return n
    if isinstance(obj, str | bytes | bytearray):
        return sys.getsizeof(obj)
    if depth > 8:
        return 64
    if isinstance(obj, ActionPayload):
        return 64 + anchor_payload_bytes(obj.prompt, depth + 1) + anchor_payload_bytes(obj.assistant, depth + 1)
    if isinstance(obj, dict):
        d = depth + 1
        return 64 + sum(40 + anchor_payload_bytes(k, d) + anchor_payload_bytes(v, d) for k, v in obj.items())
    if isinstance(obj, list | tuple):
        return 64 + sum(8 + anchor_payload_bytes(v, depth + 1) for v in obj)
    return 32 if obj is not None else 0


def agent_bytes(agent: Agent) -> int:
    """An agent's charge: the object, its anchor tuples (a hash: an int + its slot; a block's token
    count: a slot, the ints are small and shared) and its payload."""
    return AGENT_BYTES + len(agent.anchor_hashes) * (HASH_BYTES + 8) + anchor_payload_bytes(agent.payload)


def agent_id_for(tenant: str, key: int) -> str:
    return f"{xxhash.xxh3_64_intdigest(tenant.encode('utf-8', 'surrogatepass') + key.to_bytes(8, 'little')):016x}"[:12]


class TenantState:
    """One tenant's agents (by key and slot) and transition chain."""

    def __init__(self, tenant: str, config: PolicyConfig) -> None:
        self.tenant = tenant
        self.agents: dict[int, Agent] = {}  # key -> agent
        self.by_slot: dict[int, Agent] = {}
        self.free_slots: list[int] = []
        self.next_slot = 0
        self.restored: dict[int, dict[int, Agent]] = {}  # anchor blocks -> key -> agent (snapshot, unseen)
        self.max_anchor_tokens = 0  # largest anchor seen (bounds any warm's size)
        self.learner = TransitionLearner(config.epsilon, config.decay_half_life, config.r_refresh_steps)
        # every agent's tool pauses, pooled: what a tool resume's wakes go by until its own agent has
        # enough of its own (plan_resume.wake_gaps)
        self.tool_gaps: deque[float] = deque(maxlen=config.gap_samples)

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
        self.on_evict: Callable[[Agent], None] | None = None  # lets the session tracker drop references
        self.index: PrefixIndex[Agent] = PrefixIndex(config.prefix_index_max_bytes, config.min_sources_below_agent)
        self.promotions = 0
        self.retirements = 0
        self.repeats = 0
        self.shared_depth = 0  # of the last identify(): blocks other sources share (session floor)
        self.restored_pending = 0  # snapshot-restored agents not yet seen again
        self.seen = 0  # identify() calls (the tentative agents' clock)
        # (expiry in identify() calls, agent promoted on first sight)
        self.tentative: deque[tuple[int, Agent]] = deque()
        self.discarded = 0  # tentative agents dropped: never reached again
        self.bytes = 0  # sum of the live agents' cost
        self.dropped_for_bytes = 0  # agents evicted to stay within agents_max_bytes / the index budget

    def tenant(self, tenant: str) -> TenantState:
        ts = self.tenants.get(tenant)
        if ts is None:
            ts = self.tenants[tenant] = TenantState(tenant, self.config)
        return ts

    def __len__(self) -> int:
        return len(self.by_id)

    def lookup(self, view: RequestView) -> Agent | None:
        """The agent a view belongs to, read-only (no learning): for request-path hints."""
        if not view.block_hashes:
            return None
        found = self.index.lookup(view.tenant, view.block_hashes)
        return found if isinstance(found, Agent) and self.alive(found) else None

    def identify(self, view: RequestView, now: float, source: int | None = None) -> Agent | None:
        """The agent that sent ``view`` (None: no recurring prefix reached yet). ``source``: the
        request's session identity when explicit (None: inferred by the index)."""
        hashes = view.block_hashes
        if not hashes:
            return None
        self.seen = seen = self.seen + 1
        tentative = self.tentative
        if tentative and tentative[0][0] <= seen:
            self._expire_tentative(seen)
        if self.restored_pending:
            ts = self.tenants.get(view.tenant)
            if ts is not None and ts.restored:
                self._reattach(ts, hashes)
        t = view.block_tokens
        recut = view.anchor_blocks == 0 and len(t) >= 2 and t[-1] < t[-2]
        node, promoted, retired, repeat, self.shared_depth = self.index.observe(
            view.tenant, hashes, source, now, view.anchor_blocks, recut, view.header_blocks
        )
        if retired:
            for r in retired:
                if isinstance(r.agent, Agent):
                    self.retirements += 1
                    self.remove(r.agent)
                else:
                    self.index.detach(r)
        if node is None:
            return None
        if promoted is node:
            self.promotions += 1
            ts = self.tenant(view.tenant)
            agent = ts.agents.get(node.key)
            if agent is None:
                agent = self._create(ts, node.key, now)
            agent.node = node
            self.index.attach(node, agent)
            if node.passes == 1:  # a marked context on first sight: tentative
                tentative.append((seen + self.config.first_sight_window, agent))
        agent = node.agent  # an Agent, or True for a node that may never be one
        if agent is True:
            return None
        n = node.depth
        if agent.anchor_len != n:
            agent.anchor_hashes = hashes[:n]
            agent.anchor_len = n
            agent.anchor_block_tokens = t[:n]
            agent.tokens = sum(agent.anchor_block_tokens)
            ts = self.tenants[agent.tenant]
            if agent.tokens > ts.max_anchor_tokens:
                ts.max_anchor_tokens = agent.tokens
            self._charge(agent)
        if view.anchor_payload is not None and (agent.payload is None or agent.uses % 16 == 0):
            kept = truncate_payload(view.anchor_payload, n)  # refreshed now and then
            agent.payload = ActionPayload(kept) if kept is not None else None
            self._charge(agent)
        if repeat:
            agent.repeats += 1
            self.repeats += 1
        agent.uses += 1
        agent.last_seen = now
        if self.bytes > self.config.agents_max_bytes or self.index.bytes > self.index.max_bytes:
            self._shrink(now, agent)
            if not self.alive(agent):
                return None
        return cast(Agent, agent)

    def _charge(self, agent: Agent) -> None:
        cost = agent_bytes(agent)
        self.bytes += cost - agent.cost
        agent.cost = cost

    def _shrink(self, now: float, current: Agent) -> None:
        """Evict the least valuable agents until the registry and the index fit their budgets
        (the index drops the freed nodes' leaves itself); ``current`` last."""
        lam = self.config.age_lambda
        budget, index = self.config.agents_max_bytes, self.index

        def over() -> bool:
            if index.bytes > index.max_bytes:
                index.evict_leaves()
            return self.bytes > budget or index.bytes > index.max_bytes

        ranked = sorted(self.by_id.values(), key=lambda a: a.uses * math.exp(-lam * max(0.0, now - a.last_seen)))
        for victim in ranked:
            if not over():
                return
            if victim is not current:
                self.dropped_for_bytes += 1
                self.remove(victim)
        if over() and self.alive(current):  # alone over a budget
            self.dropped_for_bytes += 1
            self.remove(current)

    def _expire_tentative(self, seen: int) -> None:
        """Drop agents promoted on first sight that were not reached again within their window."""
        tentative = self.tentative
        while tentative and tentative[0][0] <= seen:
            a = tentative.popleft()[1]
            if a.uses <= 1 and self.alive(a):
                self.discarded += 1
                self.remove(a)

    def _reattach(self, ts: TenantState, hashes: tuple[int, ...]) -> None:
        """A snapshot-restored agent whose chain shows up again gets its index node back."""
        for depth, keys in list(ts.restored.items()):
            if depth > len(hashes):
                continue
            agent = keys.pop(hashes[depth - 1], None)
            if not keys:
                del ts.restored[depth]
            if agent is None:
                continue
            self.restored_pending = max(0, self.restored_pending - 1)
            if not self.alive(agent):
                continue
            node = self.index.ensure(ts.tenant, hashes[:depth])
            if node.agent is None and node.agents_below == 0:
                self.index._mark_agent(node)
                self.index.attach(node, agent)
                agent.node = node
                agent.anchor_len = 0  # refilled (hashes, tokens) by this very request

    def _create(
        self, ts: TenantState, key: int, now: float, agent_id: str | None = None, slot: int | None = None
    ) -> Agent:
        if len(self.by_id) >= self.config.max_agents:
            self._evict_one(now)
            self.tenants.setdefault(ts.tenant, ts)  # its last agent may just have gone
        if slot is None:
            slot = ts.alloc_slot()
        else:
            ts.next_slot = max(ts.next_slot, slot + 1)
        n = self.config.gap_samples
        agent = Agent(
            agent_id or agent_id_for(ts.tenant, key),
            ts.tenant,
            key,
            slot,
            gaps=deque(maxlen=n),
            tool_gaps=deque(maxlen=n),
            last_seen=now,
        )
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
        node = agent.node
        if node is not None and node.agent is agent:
            self.index.detach(node)
        agent.node = None
        self.bytes -= agent.cost
        agent.cost = 0
        # the heavy parts go now: sessions and the tentative queue drop their references lazily,
        # and every user checks ``alive`` (or an empty anchor) before reading them
        agent.payload = None
        agent.anchor_hashes = agent.anchor_block_tokens = ()
        ts.agents.pop(agent.key, None)
        ts.by_slot.pop(agent.slot, None)
        ts.learner.remove_slot(agent.slot)
        ts.free_slots.append(agent.slot)
        self.by_id.pop(agent.agent_id, None)
        self.evictions += 1
        if not ts.agents:
            del self.tenants[agent.tenant]  # bounded tenants too (salts can be per user)
        if self.on_evict is not None:
            self.on_evict(agent)

    def alive(self, agent: Agent) -> bool:
        return self.by_id.get(agent.agent_id) is agent

    def record_gap(self, agent: Agent, gap: float, finish: str | None) -> None:
        if gap < 0:
            return
        if finish == "tool_calls":
            agent.tool_gaps.append(gap)
            self.tenant(agent.tenant).tool_gaps.append(gap)
            agent.tool_gap_median = median_gap(agent.tool_gaps)
        else:
            agent.gaps.append(gap)
            agent.gap_median = median_gap(agent.gaps)
