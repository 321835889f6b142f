"""A prefix block cache whose victim is chosen by a per-group score: the engine of the scored baselines.

Why grouped: the `history` baseline (per-category reuse statistics) and `scout-engine` (per-agent
survival) both rank blocks by `score(group, last access, now)`, decreasing in age within a group.
Keeping each group's evictable blocks in a heap by last access makes the group's oldest block its
lowest-scored one, so choosing a victim costs one score per group, not a scan of the cache.

Prefix rules (as `BlockPool.access`): a request's hit is its longest resident prefix; its resident
blocks are pinned while its misses evict; then the whole request is touched deepest first (the
prefix ends most recent). Only *leaves* are evictable: a block with resident children would orphan
them (a tail without its prefix never hits). LRU gets this for free from its touch order; a scored
cache has to enforce it, so a parent becomes evictable again when its last child goes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Sequence


class GroupedCache:
    def __init__(self, capacity_blocks: int, score: Callable[[Hashable, float, float], float]):
        self.capacity = int(capacity_blocks)
        self.score = score  # (group, last access time, now) -> keep value
        self.group_of: dict[int, Hashable] = {}  # resident block -> group
        self.last: dict[int, tuple[float, int]] = {}  # resident block -> (last access, touch seq)
        self.parent_of: dict[int, int | None] = {}  # resident block -> its prefix parent
        self.children: dict[int, int] = {}  # resident block -> resident children count
        self.leaves: dict[Hashable, list] = {}  # group -> heap of (t, seq, block), lazy
        self.evictions = 0
        self._seq = 0
        self._pinned: set[int] = set()
        self._held: dict[int, int] = {}  # block -> running requests holding it (never evicted)
        self._holds: dict[Hashable, tuple[int, ...]] = {}  # request -> the blocks it holds

    def __len__(self) -> int:
        return len(self.group_of)

    def match_prefix(self, hashes: Sequence[int]) -> int:
        g = self.group_of
        n = 0
        for h in hashes:
            if h not in g:
                break
            n += 1
        return n

    def last_access(self, h: int) -> float | None:
        v = self.last.get(h)
        return None if v is None else v[0]

    def access(self, hashes: Sequence[int], groups: Sequence[Hashable], now: float) -> int:
        """Hit = leading resident blocks; then insert/touch all blocks (each into its group)."""
        hit = self.match_prefix(hashes)
        if self.capacity <= 0:
            return hit
        if len(hashes) > self.capacity:
            hashes, groups = hashes[: self.capacity], groups[: self.capacity]
        group_of = self.group_of
        misses = sum(1 for h in dict.fromkeys(hashes) if h not in group_of)
        free = self.capacity - len(group_of)
        if misses > free:
            self._pinned = set(hashes)
            self._evict(misses - free, now)
            self._pinned = set()
            room = self.capacity - len(group_of)
            if misses > room:  # running requests hold the rest: only what fits is cached
                keep = max(hit, min(len(hashes), hit + room))
                hashes, groups = hashes[:keep], groups[:keep]
        parent_of, children, last = self.parent_of, self.children, self.last
        for j, h in enumerate(hashes):  # link the new blocks to their parents
            if h not in group_of:
                p = hashes[j - 1] if j else None
                parent_of[h] = p
                if p is not None:
                    children[p] = children.get(p, 0) + 1
                group_of[h] = groups[j]
        for j in range(len(hashes) - 1, -1, -1):  # touch deepest first
            h = hashes[j]
            grp = groups[j]
            if group_of[h] != grp:
                group_of[h] = grp
            self._seq += 1
            stamp = (now, self._seq)
            last[h] = stamp
            if not children.get(h):
                heap = self.leaves.get(grp)
                if heap is None:
                    heap = self.leaves[grp] = []
                heapq.heappush(heap, (now, self._seq, h))
        return hit

    def hold(self, key: Hashable, hashes: Sequence[int]) -> None:
        """A running request holds its resident blocks until ``release(key)`` (vLLM frees a
        request's blocks when it finishes): they cannot be evicted meanwhile."""
        mine = tuple(h for h in dict.fromkeys(hashes) if h in self.group_of)
        held = self._held
        for h in mine:
            held[h] = held.get(h, 0) + 1
        self._holds[key] = mine

    def release(self, key: Hashable) -> None:
        held = self._held
        for h in self._holds.pop(key, ()):
            r = held.get(h, 0) - 1
            if r > 0:
                held[h] = r
            else:
                held.pop(h, None)

    # ------------------------------------------------------------------ eviction
    def _valid(self, grp, entry) -> bool:
        t, seq, h = entry
        return (
            self.group_of.get(h) == grp
            and self.last.get(h) == (t, seq)
            and not self.children.get(h)
            and h not in self._pinned
            and h not in self._held
        )

    def _head(self, grp):
        """The group's oldest evictable block entry (stale entries dropped), or None."""
        heap = self.leaves.get(grp)
        while heap:
            if self._valid(grp, heap[0]):
                return heap[0]
            entry = heapq.heappop(heap)
            h = entry[2]
            if (h in self._pinned or h in self._held) and self.group_of.get(h) == grp and self.last.get(h) == entry[:2]:
                self._stash.append((grp, entry))  # pinned for this request: put back later
        if heap is not None and not heap:
            del self.leaves[grp]
        return None

    def _evict(self, n: int, now: float) -> None:
        """Evict `n` leaves, lowest score first. Scores are fixed within one call (same `now`,
        same statistics): a heap over group heads, re-scored only when a head changes."""
        self._stash: list = []
        score = self.score
        top = []
        for i, grp in enumerate(list(self.leaves)):
            e = self._head(grp)
            if e is not None:
                top.append((score(grp, e[0], now), i, grp, e))
        heapq.heapify(top)
        tie = len(top)
        while n > 0 and top:
            _, _, grp, e = heapq.heappop(top)
            cur = self._head(grp)
            if cur is None:
                continue
            if cur != e:
                tie += 1
                heapq.heappush(top, (score(grp, cur[0], now), tie, grp, cur))
                continue
            heapq.heappop(self.leaves[grp])
            parent_grp = self._drop(e[2])
            n -= 1
            for g in {grp, parent_grp} - {None}:  # a parent may just have become a leaf
                cur = self._head(g)
                if cur is not None:
                    tie += 1
                    heapq.heappush(top, (score(g, cur[0], now), tie, g, cur))
        for grp, entry in self._stash:
            heapq.heappush(self.leaves.setdefault(grp, []), entry)
        self._stash = []
        if len(self.leaves) and sum(len(v) for v in self.leaves.values()) > 4 * len(self.group_of) + 1024:
            self._compact()

    def _drop(self, h: int):
        """Remove a leaf; returns the parent's group when the parent became a leaf."""
        del self.group_of[h]
        del self.last[h]
        self.children.pop(h, None)
        self.evictions += 1
        p = self.parent_of.pop(h, None)
        if p is None or p not in self.group_of:
            return None
        c = self.children.get(p, 0) - 1
        if c > 0:
            self.children[p] = c
            return None
        self.children.pop(p, None)
        t, seq = self.last[p]
        grp = self.group_of[p]
        heapq.heappush(self.leaves.setdefault(grp, []), (t, seq, p))
        return grp

    def _compact(self) -> None:
        fresh: dict = {}
        for h, grp in self.group_of.items():
            if not self.children.get(h):
                t, seq = self.last[h]
                fresh.setdefault(grp, []).append((t, seq, h))
        for heap in fresh.values():
            heapq.heapify(heap)
        self.leaves = fresh
