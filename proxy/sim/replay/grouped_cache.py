"""A block cache whose victim is chosen by a per-group score: the engine of the scored baselines.

Why grouped: the `history` baseline (per-category reuse statistics) and `scout-engine` (per-agent
survival) both rank blocks by `score(group, age)`, decreasing in age within a group. Keeping each
group in LRU order makes the group's head its lowest-scored block, so choosing a victim costs one
score per group instead of a scan of the cache. Request granularity and touch order follow
`BlockPool.access`: a request's resident blocks are taken out first (it cannot evict its own hits),
misses evict, then the whole request is re-inserted deepest first (the prefix ends most recent).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence


class GroupedCache:
    def __init__(self, capacity_blocks: int, score: Callable[[Hashable, float, float], float]):
        self.capacity = int(capacity_blocks)
        self.score = score                                  # (group, last access time, now) -> keep value
        self.group_of: dict[int, Hashable] = {}             # resident block -> group
        self.groups: dict[Hashable, OrderedDict] = {}       # group -> OrderedDict[block -> last access]
        self.evictions = 0

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
        grp = self.group_of.get(h)
        return None if grp is None else self.groups[grp][h]

    def access(self, hashes: Sequence[int], groups: Sequence[Hashable], now: float) -> int:
        """Hit = leading resident blocks; then insert/touch all blocks (each into its group)."""
        hit = self.match_prefix(hashes)
        if self.capacity <= 0:
            return hit
        if len(hashes) > self.capacity:
            hashes, groups = hashes[: self.capacity], groups[: self.capacity]
        group_of = self.group_of
        misses = 0
        for h in hashes:
            grp = group_of.pop(h, None)
            if grp is None:
                misses += 1
                continue
            od = self.groups[grp]
            del od[h]
            if not od:
                del self.groups[grp]
        free = self.capacity - len(group_of) - (len(hashes) - misses)
        if misses > free:
            self._evict(misses - max(free, 0), now)
        for h, grp in zip(reversed(hashes), reversed(groups)):
            if h in group_of:
                continue                                     # duplicate id inside one request
            group_of[h] = grp
            od = self.groups.get(grp)
            if od is None:
                od = self.groups[grp] = OrderedDict()
            od[h] = now
        return hit

    def _evict(self, n: int, now: float) -> None:
        """Evict `n` blocks. Scores are fixed within one call (same `now`, same statistics), so a
        heap over group heads needs one new score per eviction instead of one per group."""
        score = self.score
        heap = [(score(grp, next(iter(od.values())), now), i, grp) for i, (grp, od) in enumerate(self.groups.items())]
        heapq.heapify(heap)
        tie = len(heap)
        while n > 0 and heap:
            _, _, grp = heapq.heappop(heap)
            od = self.groups[grp]
            h, _ = od.popitem(last=False)
            del self.group_of[h]
            self.evictions += 1
            n -= 1
            if od:
                tie += 1
                heapq.heappush(heap, (score(grp, next(iter(od.values())), now), tie, grp))
            else:
                del self.groups[grp]
