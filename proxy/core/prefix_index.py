"""Bounded prefix index: which prompt prefixes recur, and where requests branch after them.

Why: an agent is the part of its prompt that every call re-sends. Real frameworks do not put it
in a system message of their own: the fixed instructions often share one (first user) message
with tens of KB of variable content, sit behind a framework preamble that every agent shares, or
make up the whole prompt (byte-identical repeats). A fixed "skip + N blocks" window lands in the
wrong place for each of these. This index keeps, per tenant, a radix tree over the requests'
chained block hashes and the agent is read off the tree: **the deepest prefix that requests from
several distinct sources reach and then branch after** (or end at: exact repeats).

Tree. Each node ends at a block boundary of some request and holds the edge (the hashes from its
parent's end to its own end), passes (requests reaching it), distinct sources (capped), distinct
end sources (requests ending exactly there) and last seen. Because hashes are chained, two chains
that agree at block i agree on every block before i, so one comparison checks a whole edge and
the divergence point inside an edge is a binary search.

Sources. A session's own growth is not recurrence: turn 2 re-sends turn 1. A request's source is
its conversation lineage: the source of the request it extends (it passes through a node where an
earlier request ended, or diverges only in that request's partial last block), else a fresh one;
never an explicit id (one id often spans a whole run or app: issue 23). Fan-out siblings of one
context share one source. A node whose children are finished per-task contexts is a *template*
(``prefix_node.is_template``): it is the agent, agents below it are retired, none is promoted there.

Agents (the rules, in the order applied):
1. a node is *recurring* when it has >= 2 children and >= 2 sources, or >= 2 end sources, or
   the view marked it as its fixed context (the end of its system/developer messages, or a
   generator's anchor) and it was reached twice, or it is followed by more of the prompt (a
   system prompt, then the conversation: the shape of an agent call). One session of a group chat
   re-sends each agent's system prompt with a longer history every time, a linear chain with no
   branch and one source, whose only boundary is that mark. A marked node promoted on first sight
   is *tentative*: the registry drops it again if it is not reached a second time within
   ``first_sight_window`` requests, so a system message with variable content (per-call documents)
   never stays an agent, and a system-only prompt (a selector prompt with the history inside)
   needs to recur like any other prompt;
2. a request belongs to the deepest live agent node on its chain;
3. the deepest recurring node on the chain, if deeper than that agent and not itself an ancestor
   of any agent (a shared preamble never becomes an agent once one of its children is one), is
   promoted when its *evidence* is enough: exact repeats from >= 2 sources, a marked context
   reached twice, or branching into >= ``min_children`` (3) children from >= 2 sources none of
   which recurs itself (a child branch that recurs means this node is a preamble of agents that
   are still being told apart). Below an existing agent the bar is ``min_sources_below`` (3)
   sources, so a tail that happens to recur (one web page fetched twice) rarely splits an agent;
4. a node promoted before its agents could be told apart (first calls of several agents behind
   a shared preamble, before any of them recurred) and that later turns out to be the ancestor
   of two agents, or a mere prefix of a deeper agent (its only branch leads there: a system
   prompt promoted on sight whose user-message template recurs too), is *retired*: the deeper
   agents keep their ids, the ancestor's id is dropped and never reused, and requests through it
   that reach no deeper agent get no agent until their own
   branch point recurs. Agent ids never change otherwise: an id is a function of (tenant, the
   node's last hash), so it is stable as traffic arrives and across restarts (snapshot).

Granularity. Blocks are the canonical view's (64 chars per message segment, a new block at each
message start). The anchor ends at the last *full* block before the first variable character, so
up to one block of the fixed part is not covered. A variable embedded early (a date, a task id)
ends the shared chain where it appears: no prefix cache can reuse anything after it either. A
value that changes rarely (today's date) makes one agent per value (the old one ages out); a value
that changes per session before any agent-specific text leaves only the part before it recurring,
so such agents are found per value (documented limitation).

Memory: every node is charged ~540 B + 44 B per edge hash (fitted to tracemalloc, node-heavy and
hash-heavy trees alike: tests/core/test_memory_accounting.py); over ``max_bytes`` the least recently
reached leaves (one-off tails: the cheap aged-out candidates) are evicted until it fits again, a parent left with one
child is merged into it, and empty tenant roots go. Agent nodes are never evicted while alive.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Generic, TypeVar, cast

from .prefix_memory import TreeMemory
from .prefix_node import HASH_BYTES, MAX_SOURCES, NODE_BYTES, Node, is_template

A = TypeVar("A")  # what the registry names an agent node with (agents.Agent); generic so that
# this module never imports agents.py (agents -> prefix_index is one-way: no import cycle)


class PrefixIndex(TreeMemory, Generic[A]):
    """Radix trees of block-hash chains, one root per tenant, one byte budget over all."""

    def __init__(self, max_bytes: int = 16 << 20, min_sources_below: int = 3, min_children: int = 3) -> None:
        self.max_bytes = max(1, int(max_bytes))
        self.min_sources_below = min_sources_below
        self.min_children = min_children
        self.roots: dict[str, Node] = {}
        self.counted = 0  # nodes, hashes and children dicts (see prefix_memory.TreeMemory.bytes)
        self.nodes = 0
        self.evicted = 0
        self._leaves: OrderedDict[Node, None] = OrderedDict()  # LRU of leaves (eviction order)
        self._next_src = 1

    # --- walk --------------------------------------------------------------------------------
    def _root(self, tenant: str) -> Node:
        r = self.roots.get(tenant)
        if r is None:
            r = self.roots[tenant] = Node((), None, 0)
            r.tenant = tenant
            self._charge(r)
        return r

    def _new_leaf(self, parent: Node, edge: tuple[int, ...], depth: int) -> Node:
        leaf = Node(edge, parent, depth)
        ch = parent.children
        if ch is None:
            ch = parent.children = {}
            before = 0
            self._leaves.pop(parent, None)
        else:
            before = sys.getsizeof(ch)
        ch[edge[0]] = leaf
        self.counted += sys.getsizeof(ch) - before  # a dict's real size: grows in steps, kept on pops
        parent.gen += 1
        leaf.last_gen = parent.gen
        if not parent.template:
            is_template(parent)
        self.counted += NODE_BYTES + HASH_BYTES * len(edge)
        self.nodes += 1
        self._leaves[leaf] = None
        return leaf

    def _split(self, parent: Node, child: Node, k: int) -> Node:
        """Cut child's edge after k hashes; returns the new middle node (child's stats copied)."""
        e = child.edge
        mid = Node(e[:k], parent, parent.depth + k)
        mid.passes, mid.srcs = child.passes, child.srcs
        mid.agents_below = child.agents_below + (1 if child.agent is not None else 0)
        mid.children = {e[k]: child}
        mid.last_gen, mid.gen, child.last_gen = child.last_gen, 1, 1
        mid.rec = 1 if len(child.srcs) >= 2 else 0
        parent.children[e[0]] = mid  # type: ignore[index]
        child.edge = e[k:]
        child.parent = mid
        self.counted += NODE_BYTES + sys.getsizeof(mid.children)  # the hashes just moved between the two edges
        self.nodes += 1
        return mid

    def _walk(
        self, tenant: str, hashes: tuple[int, ...], create: bool, cuts: tuple[int, ...] = ()
    ) -> tuple[list[Node], int | None]:
        """Nodes on the chain from the root (the last one ends at len(hashes) when create), and the
        lineage of the request this one extends (None: none). ``cuts``: depths that must end a node
        (created by splitting when missing)."""
        node = self.roots.get(tenant)
        path: list[Node] = []
        lineage: int | None = None
        if node is None:
            if not create:
                return path, None
            node = self._root(tenant)
        n, pos = len(hashes), 0
        c1 = c2 = n
        if cuts:
            c1, c2 = cuts
            if not 0 < c1 < n:
                c1 = n
            if not 0 < c2 < n:
                c2 = n
            elif c2 < c1:
                c1, c2 = c2, c1
        nxt = c1
        while pos < n:
            if nxt <= pos:
                nxt = c2 if c2 > pos else n
            ch = node.children
            child = ch.get(hashes[pos]) if ch is not None else None
            if child is None:
                if not create:
                    break
                node = self._new_leaf(node, hashes[pos:nxt], nxt)
                path.append(node)
                pos = nxt
                continue
            e = child.edge
            m = len(e)
            if pos + m <= n and hashes[pos + m - 1] == e[-1]:
                if pos + m > nxt:  # the edge runs past a required boundary
                    node = self._split(node, child, nxt - pos)
                    pos = nxt
                    path.append(node)
                    continue
                node = child
                pos += m
                path.append(child)
                if pos < n and child.agent is None:
                    if child.ends:
                        lineage = child.lineage  # extends an earlier request
                    elif child.recut is not None and (pos + 1 < n or hashes[pos] not in (child.children or ())):
                        lineage = child.recut  # extends one, re-cutting its partial last block
                        # (not: an exact repeat of it, one block on)
                continue
            lo, hi = 1, min(m, n - pos)  # e[0] == hashes[pos]: k >= 1
            while lo < hi:  # largest k with equal hashes[pos+k-1], e[k-1]
                mid_k = (lo + hi + 1) // 2
                if hashes[pos + mid_k - 1] == e[mid_k - 1]:
                    lo = mid_k
                else:
                    hi = mid_k - 1
            k = lo
            if not create:
                break
            if pos + k > nxt:
                k = nxt - pos
            elif k == m - 1 and child.ends and child.children is None and pos + k < n:
                lineage = child.lineage  # re-cut partial last block of an earlier prompt
            node = self._split(node, child, k)
            pos += k
            path.append(node)
        return path, lineage

    # --- learning ------------------------------------------------------------------------------
    def observe(
        self,
        tenant: str,
        hashes: tuple[int, ...],
        source: int | None,
        now: float,
        mark: int = 0,
        recut: bool = False,
        floor: int = 0,
    ) -> tuple[Node | None, Node | None, tuple[Node, ...], bool, int]:
        """Insert one request's chain and apply the agent rules (module docstring). ``mark``: blocks
        the view marks as its fixed context (a system/developer message; a generator's anchor).
        ``recut``: the last block is partial and a follow-up will re-cut it (raw prompts, traces):
        a node is kept one block earlier too, so the follow-up still inherits this source.
        ``floor``: a node this shallow is never promoted (the chat envelope: model + tools only).
        Returns the fields of an ``Observation`` as a plain tuple (once per request: no object).
        ``hashes`` must not be empty."""
        n = len(hashes)
        path, lineage = self._walk(tenant, hashes, True, (mark, n - 1) if recut else (mark, 0) if mark else ())
        if source is None:
            source = lineage
        if source is None:
            source = self._next_src
            self._next_src += 1
        end = path[-1]
        if recut and len(path) >= 2 and path[-2].depth == len(hashes) - 1:
            path[-2].recut = source
        repeat = end.ends > 0 and source not in end.end_srcs
        end.ends += 1
        es = end.end_srcs
        if source not in es and len(es) < MAX_SOURCES:
            end.end_srcs = es + (source,)
        end.lineage = source
        leaves = self._leaves
        agent_node = cand = None
        shared = 0
        parent = self.roots[tenant]
        below_tpl = False  # under a template agent: per-task contexts, never agents
        for node in path:
            node.passes += 1
            node.last_gen = parent.gen
            if node.depth == mark:
                node.marked = True
            srcs = node.srcs
            if source not in srcs and len(srcs) < MAX_SOURCES:
                node.srcs = srcs = srcs + (source,)
                if len(srcs) == 2:
                    parent.rec += 1
            parent = node
            if below_tpl:
                continue
            if node.agent is not None:
                agent_node = node
                cand = None
                below_tpl = node.template
                continue
            ch = node.children
            if node.template and node.depth > floor:
                cand = node  # the template is the agent, whatever was promoted below it
                shared = node.depth
                below_tpl = True
            elif ch is not None and len(ch) >= 2 and len(srcs) >= 2:
                shared = node.depth
                if node.agents_below == 0 and shared > floor:
                    cand = node
            elif (
                ((node.marked and (node.passes >= 2 or node.depth < n)) or len(node.end_srcs) >= 2)
                and node.agents_below == 0
                and node.depth > floor
            ):
                cand = node
        if end.ends > 1 and end.children is None and end in leaves:
            leaves.move_to_end(end)  # a repeat: this leaf is hot again
        promoted = None
        retired: tuple[Node, ...] = ()
        if cand is not None:
            need = 2 if agent_node is None else self.min_sources_below
            if cand.evidence(self.min_children) >= need:
                promoted = cand
                below = self._agents_under(cand) if cand.agents_below else ()
                retired = self._mark_agent(cand) + below
                agent_node = cand
        elif agent_node is not None and agent_node.template and agent_node.agents_below:
            retired = self._agents_under(agent_node)  # promoted before it was known a template
        if self.bytes > self.max_bytes:  # (a property: counted + the leaf LRU's and roots' real sizes)
            self._evict(now)
        return agent_node, promoted, retired, repeat, shared  # an Observation's fields

    def _agents_under(self, node: Node) -> tuple[Node, ...]:
        """Agent nodes below ``node`` (retired when it turns out to be their template)."""
        out: list[Node] = []
        stack = [node]
        while stack:
            for c in (stack.pop().children or {}).values():
                if c.agent is not None:
                    out.append(c)
                if c.agents_below:
                    stack.append(c)
        return tuple(out)

    def attach(self, node: Node, agent: A) -> None:
        """Name a promoted node (the registry calls this with the Agent it created)."""
        node.agent = agent

    def _mark_agent(self, node: Node) -> tuple[Node, ...]:
        node.agent = True  # placeholder until attach(); counts as an agent now
        self._leaves.pop(node, None)
        retired = []
        p = node.parent
        only_path = True  # every node up to here has this one branch only
        while p is not None:
            p.agents_below += 1
            only_path = only_path and p.children is not None and len(p.children) == 1
            if p.agent is not None and (p.agents_below >= 2 or only_path):
                retired.append(p)  # a preamble of two agents, or a mere prefix of this one
            p = p.parent
        return tuple(retired)

    def detach(self, node: Node) -> None:
        """The node is no longer an agent (retired, or its agent was evicted by the registry)."""
        if node.agent is None:
            return
        node.agent = None
        p = node.parent
        while p is not None:
            p.agents_below = max(0, p.agents_below - 1)
            p = p.parent
        if node.children is None:
            self._leaves[node] = None
            self._leaves.move_to_end(node, last=False)

    def ensure(self, tenant: str, hashes: tuple[int, ...]) -> Node:
        """The node ending at len(hashes), created without counting a request (snapshot restore)."""
        path, _ = self._walk(tenant, hashes, True)
        return path[-1]

    def lookup(self, tenant: str, hashes: tuple[int, ...]) -> A | None:
        """The deepest agent on a chain, read-only (no counts, no promotion)."""
        path, _ = self._walk(tenant, hashes, False)
        found = None
        for node in path:
            if node.agent is not None and node.agent is not True:
                found = node.agent
        return cast("A | None", found)
