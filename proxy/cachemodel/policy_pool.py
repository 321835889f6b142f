"""A block pool whose free-slot order (which free block goes next) is an `Evictor`'s choice.

Why: the replay compares eviction policies (`history`, `scout-engine`, pinned Belady) *inside* the
simulated engine, so each must be the engine pool's eviction order and nothing else: the pool's
rules (ref counts, touch-before-allocate, held blocks never evicted, deepest-first freeing) stay
`BlockPool`'s; only the free queue is replaced. `SimEngine` builds a stock `BlockPool`; a driver
swaps in a `PolicyPool` before the first request (`engine.pool = PolicyPool(...)`).

`Evictor` protocol: `push(key, now)` when a block joins the free queue (ref count 0), `remove(key)`
when a request touches it again, `pop(now)` for the victim, `__len__`. `freeing(req_id)` is called
before a request's blocks are pushed, so an evictor can label them by that request.
Keys are block hashes or the pool's unhashed slots (negative ints, no cache value).

`ScoredEvictor` is the shared engine of the scored baselines: per group a queue of free blocks by
last free time; the victim is the group head with the lowest `score(group, last, now)` (scores
decrease with age within a group, so the oldest block is its group's lowest). Blocks whose group is
`None` (unhashed slots, decode tails, unknown blocks) go first, oldest first. Unlike the retired
replay-only `GroupedCache` there is no leaf rule: as in vLLM's own free queue, a prefix block may go
before a free child (which then never hits); LRU avoids it by freeing deepest first, a scored
order may not.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

from proxy.cachemodel.block_pool import BlockPool


class Evictor(Protocol):
    def __len__(self) -> int: ...
    def push(self, key: Hashable, now: float) -> None: ...
    def remove(self, key: Hashable) -> None: ...
    def pop(self, now: float) -> Hashable: ...
    def freeing(self, req_id: Hashable) -> None: ...


class PolicyPool(BlockPool):
    """`BlockPool` (LRU mode rules) with the free queue delegated to `evictor`."""

    def __init__(self, capacity_blocks: int, evictor: Evictor):
        super().__init__(capacity_blocks, "lru")
        self.evictor = evictor

    def _free_len(self) -> int:
        return len(self.evictor)

    def _push_free(self, key: Hashable, now: float) -> None:
        self.evictor.push(key, now)

    def _remove_free(self, key: Hashable) -> None:
        self.evictor.remove(key)

    def _pop_victim(self, now: float) -> Hashable:
        return self.evictor.pop(now)

    def free(self, req_id: Hashable, now: float, tail_hashes: Sequence[Hashable] = ()) -> None:
        if req_id in self._held:
            self.evictor.freeing(req_id)
        super().free(req_id, now, tail_hashes)

    def access(self, hashes: Sequence[Hashable], now: float, priority: int = 0) -> int:
        return self._access_general(hashes, now, priority)  # the fast paths read the LRU queue

    def eviction_order(self, now: float = 0.0) -> list:
        raise NotImplementedError("a policy pool's order is its evictor's")

    def reset(self) -> bool:
        raise NotImplementedError("a policy pool is not reset")


class ScoredEvictor:
    """Lowest `score(group, last free time, now)` first; `group_of(key)` labels a block when freed.
    Scores are taken as fixed for one `now` (and one `version`: bump it when the statistics behind
    `score` change), so a burst of evictions keeps a heap over the group heads instead of
    re-scoring every group per victim."""

    def __init__(
        self, score: Callable[[Hashable, float, float], float], group_of: Callable[[Hashable], Hashable | None]
    ):
        self.score = score
        self.group_of = group_of
        self.dead: OrderedDict = OrderedDict()  # group None: evicted first, oldest first
        self.heaps: dict[Hashable, list] = {}  # group -> heap of (t, seq, key), lazy
        self.where: dict[Hashable, tuple[Hashable, float, int]] = {}  # free key -> (group, t, seq)
        self._seq = 0
        self.freeing_req: Hashable = None
        self.version = 0
        self._top: list = []  # heap of (score, t, seq, group) over group heads, for `_top_at`
        self._top_at: tuple | None = None
        self._in_top: set = set()

    def __len__(self) -> int:
        return len(self.dead) + len(self.where)

    def freeing(self, req_id: Hashable) -> None:
        self.freeing_req = req_id

    def push(self, key: Hashable, now: float) -> None:
        grp = self.group_of(key)
        if grp is None:
            self.dead[key] = None
            return
        self._seq += 1
        self.where[key] = (grp, now, self._seq)
        heapq.heappush(self.heaps.setdefault(grp, []), (now, self._seq, key))
        if self._top_at == (now, self.version) and grp not in self._in_top:  # else: rebuilt at the next pop
            self._in_top.add(grp)
            heapq.heappush(self._top, (self.score(grp, now, now), now, self._seq, grp))

    def remove(self, key: Hashable) -> None:
        if self.where.pop(key, None) is None:
            del self.dead[key]

    def _head(self, grp: Hashable) -> tuple | None:
        heap = self.heaps.get(grp)
        where = self.where
        while heap:
            _, seq, key = heap[0]
            w = where.get(key)
            if w is not None and w[2] == seq:
                return heap[0]
            heapq.heappop(heap)
        return None

    def _rebuild(self, now: float) -> None:
        top = []
        self._in_top = set()
        for grp in list(self.heaps):
            head = self._head(grp)
            if head is None:
                del self.heaps[grp]
                continue
            top.append((self.score(grp, head[0], now), head[0], head[1], grp))
            self._in_top.add(grp)
        heapq.heapify(top)
        self._top = top
        self._top_at = (now, self.version)

    def pop(self, now: float) -> Hashable:
        if self.dead:
            return self.dead.popitem(last=False)[0]
        if self._top_at != (now, self.version):
            self._rebuild(now)
        top = self._top
        while top:
            _, _, seq, grp = heapq.heappop(top)
            head = self._head(grp)
            if head is None:
                self._in_top.discard(grp)
                continue
            if head[1] != seq:  # the head moved (touched): score the new one
                heapq.heappush(top, (self.score(grp, head[0], now), head[0], head[1], grp))
                continue
            heapq.heappop(self.heaps[grp])
            key = head[2]
            del self.where[key]
            nxt = self._head(grp)
            if nxt is None:
                self._in_top.discard(grp)
            else:
                heapq.heappush(top, (self.score(grp, nxt[0], now), nxt[0], nxt[1], grp))
            return key
        raise IndexError("no free block to evict")
