"""The prefix index's memory bound: byte accounting and cold-leaf eviction (a mixin of
``PrefixIndex`` in prefix_index.py, which owns the state declared below).

Why apart: what the index learns (passes, sources, agents) and how it stays within
``prefix_index_max_bytes`` are separate rules; each half stays under the core's module cap.
Agent nodes are never evicted here; a leaf's removal merges a lone sibling into its parent so
the tree stays a radix tree.
"""

from __future__ import annotations

import sys
from collections import OrderedDict

from .prefix_node import HASH_BYTES, NODE_BYTES, Node


class TreeMemory:
    """Byte accounting (issue 39): a node's fixed cost and its hashes are charged as constants
    (``NODE_BYTES``, ``HASH_BYTES``), but the dicts are charged at their real size: each children
    dict by the change in ``sys.getsizeof`` at every insertion (a dict grows in steps and never
    shrinks on pops, so a constant a child was 6-11% off on star-shaped sets) and refunded whole
    when it goes; the leaf LRU and the roots dict are read when ``bytes`` is (O(1)). Before, 1 MiB
    counted was 1.06-1.11 MiB real on star shapes and 0.93 on branchy ones."""

    max_bytes: int
    roots: dict[str, Node]
    counted: int
    nodes: int
    evicted: int
    _leaves: OrderedDict[Node, None]

    @property
    def bytes(self) -> int:
        """Estimated real bytes held: nodes, hashes, children dicts, leaf LRU, roots."""
        return self.counted + sys.getsizeof(self._leaves) + sys.getsizeof(self.roots)

    def _charge(self, n: Node, sign: int = 1) -> None:
        self.counted += sign * (NODE_BYTES + HASH_BYTES * len(n.edge))
        self.nodes += sign

    # --- memory ----------------------------------------------------------------------------------
    def evict_leaves(self) -> None:
        """Evict cold leaves until the budget fits (the registry calls this after freeing agent
        nodes: agent nodes themselves are never evicted here)."""
        self._evict(0.0)

    def _evict(self, now: float) -> None:
        leaves = self._leaves
        budget = self.max_bytes  # just under the cap: at steady state each
        # new tail evicts about one cold leaf (no pauses)
        guard = len(leaves) + 16
        while self.bytes > budget and leaves and guard > 0:
            guard -= 1
            leaf = next(iter(leaves))
            del leaves[leaf]
            if leaf.agent is not None or leaf.children is not None:
                continue  # promoted or grown since: not a leaf
            self._remove_leaf(leaf)

    def _remove_leaf(self, leaf: Node) -> None:
        parent = leaf.parent
        self._charge(leaf, -1)
        self.evicted += 1
        if parent is None:
            return
        ch = parent.children
        if ch is not None:
            ch.pop(leaf.edge[0], None)
            if not ch:
                parent.children = None
                self.counted -= sys.getsizeof(ch)
        if parent.parent is None:  # tenant root
            if parent.children is None:
                self._charge(parent, -1)
                self.roots.pop(parent.tenant, None)
            return
        if parent.agent is not None or parent.ends:
            if parent.children is None:
                self._leaves[parent] = None
                self._leaves.move_to_end(parent, last=False)
            return
        if parent.children is None:
            self._leaves[parent] = None
            self._leaves.move_to_end(parent, last=False)
        elif len(parent.children) == 1:  # merge the lone child into its parent
            only = next(iter(parent.children.values()))
            self.counted -= sys.getsizeof(parent.children)  # the merged node goes with its dict
            grand = parent.parent
            only.edge = parent.edge + only.edge
            only.parent = grand
            only.last_gen = parent.last_gen
            grand.children[parent.edge[0]] = only  # type: ignore[index]
            self.counted -= NODE_BYTES
            self.nodes -= 1

    def stats(self) -> dict[str, int]:
        return {
            "nodes": self.nodes,
            "bytes": self.bytes,
            "max_bytes": self.max_bytes,
            "evicted": self.evicted,
            "tenants": len(self.roots),
        }
