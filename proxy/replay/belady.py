"""Belady's MIN at request granularity with bypass: the bound on what any policy can gain.

Why this shape: the replay needs the offline optimum *on the same capacity* to say how much of the
LRU→optimum gap a policy closes. Requests are processed in order; a request hits on the longest
prefix of its blocks that is resident; then each of its blocks is kept or not: a resident block gets
its next-use time refreshed, a missing block is admitted if there is room, or if the resident block
used farthest in the future is used later than it (that block is evicted), and is bypassed
otherwise. Blocks never used again are never admitted. Chained hashes make a deeper block's next
use no earlier than its prefix's, so MIN never keeps a tail without its prefix by preference.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

INF = 1 << 62


def next_uses(block_lists: Sequence[Sequence[int]]) -> list[list[int]]:
    """For request i and block position j: the index of the next request naming that block (INF if none)."""
    last: dict[int, int] = {}
    out: list[list[int]] = [[]] * len(block_lists)
    for i in range(len(block_lists) - 1, -1, -1):
        blocks = block_lists[i]
        get = last.get
        out[i] = [get(h, INF) for h in blocks]
        for h in blocks:
            last[h] = i
    return out


def belady_hits(block_lists: Sequence[Sequence[int]], capacity: int) -> list[int]:
    """Prefix-hit block count per request under MIN with bypass at `capacity` blocks."""
    nxt = next_uses(block_lists)
    cache: dict[int, int] = {}  # block -> its next use
    depth: dict[int, int] = {}  # block -> its position in the chain (deeper goes first on ties)
    heap: list[tuple[int, int, int]] = []  # (-next use, -depth, block); lazy: stale entries skipped
    push, pop = heapq.heappush, heapq.heappop
    hits: list[int] = []
    for i, blocks in enumerate(block_lists):
        hit = 0
        for h in blocks:
            if h not in cache:
                break
            hit += 1
        hits.append(hit)
        if capacity <= 0:
            continue
        for j, (h, nu) in enumerate(zip(blocks, nxt[i])):
            if h in cache:
                cache[h] = nu
                push(heap, (-nu, -j, h))
                continue
            if nu >= INF:
                continue
            if len(cache) < capacity:
                cache[h] = nu
                depth[h] = j
                push(heap, (-nu, -j, h))
                continue
            while True:  # farthest live entry (deepest on ties)
                neg, negd, victim = heap[0]
                if cache.get(victim) == -neg:
                    break
                pop(heap)
            if -neg > nu or (-neg == nu and -negd > j):
                pop(heap)
                del cache[victim]
                depth.pop(victim, None)
                cache[h] = nu
                depth[h] = j
                push(heap, (-nu, -j, h))
            # else: bypass — h is needed later than everything resident
        if len(heap) > 4 * capacity + 1024:  # compact stale entries
            heap = [(-v, -depth.get(k, 0), k) for k, v in cache.items()]
            heapq.heapify(heap)
    return hits


class NextUseEvictor:
    """Pinned Belady on the engine's pool (`PolicyPool`): among the free blocks (no running request
    holds them), evict the one whose next use by a request not yet finished is farthest (deepest
    on ties; blocks never used again, unhashed slots and decode tails first).

    `block_lists[j]` are the full-block hashes request j names (the engine's hashes); `index_of`
    maps an engine request id to j (None: an action, not part of the stream). A request's uses are
    dropped when it frees its blocks, so a free block's key is fixed while it stays free: a request
    naming it would have touched it out of the free queue."""

    def __init__(self, block_lists: Sequence[Sequence[int]], index_of):
        from collections import deque

        uses: dict[int, deque] = {}
        depth: dict[int, int] = {}
        for j, blocks in enumerate(block_lists):
            for d, h in enumerate(blocks):
                q = uses.get(h)
                if q is None:
                    q = uses[h] = deque()
                    depth[h] = d
                if not q or q[-1] != j:
                    q.append(j)
        self.uses = uses
        self.depth = depth
        self.done = [False] * len(block_lists)
        self.index_of = index_of
        self.heap: list[tuple[int, int, int, object]] = []  # (-next use, -depth, seq, key), lazy
        self.where: dict = {}  # free key -> seq
        self._seq = 0

    def __len__(self) -> int:
        return len(self.where)

    def freeing(self, req_id) -> None:
        j = self.index_of(req_id)
        if j is not None:
            self.done[j] = True

    def next_use(self, key) -> int:
        q = self.uses.get(key)
        if q is None:
            return INF
        done = self.done
        while q and done[q[0]]:
            q.popleft()
        return q[0] if q else INF

    def push(self, key, now: float) -> None:
        self._seq += 1
        self.where[key] = self._seq
        heapq.heappush(self.heap, (-self.next_use(key), -self.depth.get(key, INF), self._seq, key))

    def remove(self, key) -> None:
        del self.where[key]

    def pop(self, now: float):
        heap, where = self.heap, self.where
        while heap:
            _, _, seq, key = heapq.heappop(heap)
            if where.get(key) == seq:
                del where[key]
                return key
        raise IndexError("no free block to evict")
