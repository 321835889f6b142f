"""One node of the prefix index (``prefix_index.py``): a run of block hashes with the evidence
that decides whether the prefix ending here is an agent — how many distinct sources passed it,
ended at it, branched after it — and what one request's walk found.

Why separate: the node's rules (``recurring``, ``evidence``) are the definition of "an agent is
the prefix that recurs"; the index around them is bookkeeping (walk, split, evict).
"""

from __future__ import annotations

from typing import Any, NamedTuple

# Estimated bytes, fitted to tracemalloc (issue 22; tests/core/test_memory_accounting.py): a node is
# the slotted object, its edge tuple, its source tuples and ints, its entry in the parent's children
# dict and in the index's leaf LRU (~480 B); a hash is a 64-bit int plus its tuple slot (~44 B).
# The old 200 B a node under-counted node-heavy (adversarial) trees by 2x.
NODE_BYTES = 480
HASH_BYTES = 44
MAX_SOURCES = 3


class Node:
    __slots__ = (
        "agent",
        "agents_below",
        "children",
        "depth",
        "edge",
        "end_srcs",
        "ends",
        "lineage",
        "marked",
        "parent",
        "passes",
        "recut",
        "srcs",
        "tenant",
    )

    def __init__(self, edge: tuple[int, ...], parent: Node | None, depth: int) -> None:
        self.edge = edge
        self.parent = parent
        self.children: dict[int, Node] | None = None
        self.depth = depth
        self.passes = 0
        self.srcs: tuple[int, ...] = ()
        self.end_srcs: tuple[int, ...] = ()
        self.ends = 0
        self.agent: Any = None  # the registry's Agent while this node is one
        self.tenant = ""  # roots only: whose tree this is
        self.agents_below = 0  # agent nodes strictly below
        self.lineage: int | None = 0  # source of the latest request that ended here
        self.marked = False  # a view marked its end as the fixed context (system message)
        self.recut: int | None = None  # source of a request ending one (re-cut partial) block later

    @property
    def key(self) -> int:
        return self.edge[-1]

    def recurring(self) -> bool:
        ch = self.children
        return (
            (ch is not None and len(ch) >= 2 and len(self.srcs) >= 2)
            or len(self.end_srcs) >= 2
            or (self.marked and self.passes >= 2)
        )

    def evidence(self, min_children: int) -> int:
        """Distinct sources that support this node being an agent now (0: not yet)."""
        if len(self.end_srcs) >= 2:
            return len(self.end_srcs)  # exact repeats
        if self.marked:
            return max(2, len(self.srcs))  # a marked fixed context (recurring, or followed by
            # variable content: promoted on sight, tentatively)
        ch = self.children
        if ch is None or len(ch) < min_children or len(self.srcs) < 2:
            return 0
        for c in ch.values():  # a branch that recurs itself: a preamble
            if len(c.srcs) >= 2:
                return 0
        return len(self.srcs)


class Observation(NamedTuple):
    """What one request's walk found (a tuple: built once per request)."""

    agent_node: Node | None  # deepest live agent node on the chain (after promotion)
    promoted: Node | None  # a node promoted by this request (the registry names it)
    retired: tuple[Node, ...]  # agent nodes retired by this promotion
    repeat: bool  # the whole prompt was seen before from another source
    shared: int = 0  # depth of the deepest node other sources reached and branched after


def add_source(t: tuple[int, ...], s: int) -> tuple[int, ...]:
    if s in t or len(t) >= MAX_SOURCES:
        return t
    return t + (s,)
