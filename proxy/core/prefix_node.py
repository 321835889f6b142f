"""One node of the prefix index (``prefix_index.py``): a run of block hashes with the evidence
that decides whether the prefix ending here is an agent — how many distinct sources passed it,
ended at it, branched after it — and what one request's walk found.

Why separate: the node's rules (``recurring``, ``evidence``) are the definition of "an agent is
the prefix that recurs"; the index around them is bookkeeping (walk, split, evict).
"""

from __future__ import annotations

from typing import Any, NamedTuple

# Estimated bytes, fitted to tracemalloc (issues 22, 39; tests/core/test_memory_accounting.py): a node
# is the slotted object, its edge tuple, its source tuples and ints (~350 B with the lineage fields);
# a hash is a 64-bit int plus its tuple slot (~44 B). The dicts a node sits in (its parent's
# children dict, the leaf LRU) are charged at their real size by prefix_memory.TreeMemory (issue 39:
# as 540 B a node, all included, star-shaped sets were 6-11% over the count, branchy ones 7% under).
# The old 200 B a node under-counted node-heavy (adversarial) trees by 2x.
NODE_BYTES = 350
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
        "gen",
        "last_gen",
        "lineage",
        "marked",
        "parent",
        "passes",
        "rec",
        "recut",
        "srcs",
        "template",
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
        self.gen = 0  # children born here so far (the clock of per-task contexts below)
        self.last_gen = 0  # the parent's ``gen`` when a request last passed here
        self.template = False  # its children are per-task contexts (``is_template``)
        self.rec = 0  # children that reached >= 2 sources (about: gates the scan in is_template)

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
        if self.marked or self.template:
            return max(2, len(self.srcs))  # a marked fixed context (recurring, or followed by
            # variable content: promoted on sight, tentatively)
        ch = self.children
        if ch is None or len(ch) < min_children or len(self.srcs) < 2:
            return 0
        for c in ch.values():  # a branch that recurs itself: a preamble
            if len(c.srcs) >= 2:
                return 0
        return len(self.srcs)


# Per-task contexts (issue 23). A child is a *finished context* when it recurred (>= 2 sources) and
# then ``CONTEXT_GONE`` newer siblings were born without it being reached again; a node with
# ``CONTEXT_MIN`` finished contexts below it is a *template*: one fixed prompt re-rendered per task
# (a task's calls re-render it with the current state, so each task's prefix recurs, then dies).
# The template is the agent; its children never are. Agents behind a shared preamble keep being
# reached while no new siblings are born, so they never finish.
CONTEXT_GONE = 3
CONTEXT_MIN = 3
SCAN_CHILDREN = 64  # children looked at per birth (bounded work; enough to decide)


def is_template(node: Node) -> bool:
    """Called when a child is born at ``node``: does it now show finished per-task contexts?"""
    if node.template:
        return True
    ch = node.children
    if ch is None or node.rec < CONTEXT_MIN or node.gen < CONTEXT_MIN + CONTEXT_GONE - 1:
        return False
    gone = 0
    horizon = node.gen - CONTEXT_GONE
    for i, c in enumerate(ch.values()):
        if i >= SCAN_CHILDREN:
            break
        if len(c.srcs) >= 2 and c.last_gen <= horizon:
            gone += 1
            if gone >= CONTEXT_MIN:
                node.template = True
                return True
    return False


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
