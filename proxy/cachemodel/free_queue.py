"""The free queue of the `priority` eviction mode (SGLang `--radix-eviction-policy priority`).

Why a structure of its own: replays pass up to ~100 distinct priorities (p_surv × 100), and a scan
over every priority per evicted block made the mode ~50× slower than LRU. Order of eviction:
(effective priority, last use, sequence), lowest first, where a block's effective priority falls
back to 0 once it has been idle `retention_seconds`.

Layout: one OrderedDict per priority (entries appended with non-decreasing `last`, so each bucket's
head is its oldest entry), a lazy heap over the heads of the non-zero buckets (oldest first: the only
head that can have decayed is the oldest one), and a lazy heap of the priorities present. A victim is
the older of bucket 0's head and the oldest non-zero head if that one has decayed; failing both, the
head of the lowest priority bucket. Negative priorities (rare; decay raises them to 0, so a bucket's
head is not its best entry) fall back to a full scan.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Hashable


class PriorityFreeQueue:
    def __init__(self, retention_seconds: float):
        self.retention = float(retention_seconds)
        self.buckets: dict[int, OrderedDict] = {}  # prio -> OrderedDict[key -> (last, seq)]
        self._heads: list = []  # (last, seq, prio, key) of non-zero bucket heads (lazy)
        self._prios: list[int] = []  # priorities with a bucket (lazy)
        self._in_prios: set[int] = set()
        self._seq = 0
        self._n = 0
        self._negative = 0  # buckets with a negative priority

    def __len__(self) -> int:
        return self._n

    def clear(self) -> None:
        self.buckets.clear()
        self._heads.clear()
        self._prios.clear()
        self._in_prios.clear()
        self._n = 0
        self._negative = 0

    def push(self, key: Hashable, prio: int, now: float) -> None:
        """Append a free block with its (already effective) priority, used last at `now`."""
        self._seq += 1
        bucket = self.buckets.get(prio)
        if bucket is None:
            bucket = self.buckets[prio] = OrderedDict()
            if prio not in self._in_prios:
                self._in_prios.add(prio)
                heapq.heappush(self._prios, prio)
            if prio < 0:
                self._negative += 1
        bucket[key] = (now, self._seq)
        self._n += 1
        if prio != 0 and len(bucket) == 1:
            self._push_head((now, self._seq, prio, key))

    def remove(self, key: Hashable, prio: int) -> None:
        bucket = self.buckets[prio]
        head = next(iter(bucket)) == key
        del bucket[key]
        self._n -= 1
        self._after_removal(prio, bucket, head)

    def pop_victim(self, now: float) -> Hashable:
        return self.pop_victims(1, now)[0]

    def pop_victims(self, count: int, now: float) -> list:
        """Remove and return the next `count` victims (one pass; the hot path of replays)."""
        if count > self._n:
            raise RuntimeError("no free block to evict")
        out = []
        buckets, heads, ret = self.buckets, self._heads, self.retention
        for _ in range(count):
            if self._negative:
                prio, key = self._negative_scan(now)
            else:
                cand = None
                b0 = buckets.get(0)
                if b0:
                    k0 = next(iter(b0))
                    last0, seq0 = b0[k0]
                    cand = (0, k0)
                while heads:  # oldest valid head of a non-zero bucket
                    last, seq, p, k = heads[0]
                    b = buckets.get(p)
                    if b is not None and next(iter(b)) == k and b[k][1] == seq:
                        if now - last >= ret and (cand is None or (last, seq) < (last0, seq0)):
                            cand = (p, k)
                        break
                    heapq.heappop(heads)
                if cand is None:  # nothing at effective priority 0
                    prios = self._prios
                    while prios[0] not in buckets:
                        self._in_prios.discard(heapq.heappop(prios))
                    cand = (prios[0], next(iter(buckets[prios[0]])))
                prio, key = cand
            bucket = buckets[prio]
            del bucket[key]
            self._n -= 1
            self._after_removal(prio, bucket, True)
            out.append(key)
        return out

    def ordered(self, now: float) -> list:
        """Every free block in eviction order (O(n log n); tests and debugging)."""
        items = []
        for prio, bucket in self.buckets.items():
            for key, (last, seq) in bucket.items():
                items.append((self._effective(prio, last, now), last, seq, key))
        items.sort(key=lambda t: t[:3])
        return [t[3] for t in items]

    # ------------------------------------------------------------------ internals
    def _effective(self, prio: int, last: float, now: float) -> int:
        return 0 if prio != 0 and now - last >= self.retention else prio

    def _after_removal(self, prio: int, bucket: OrderedDict, was_head: bool) -> None:
        if not bucket:
            del self.buckets[prio]
            if prio < 0:
                self._negative -= 1
        elif was_head and prio != 0:
            key = next(iter(bucket))
            last, seq = bucket[key]
            self._push_head((last, seq, prio, key))

    def _push_head(self, entry: tuple) -> None:
        heads = self._heads
        if len(heads) > 4 * len(self.buckets) + 64:  # drop stale entries now and then
            heads[:] = [(b[k][0], b[k][1], p, k) for p, b in self.buckets.items() if p != 0 for k in (next(iter(b)),)]
            heapq.heapify(heads)
            if entry[2] in self.buckets and next(iter(self.buckets[entry[2]])) == entry[3]:
                return  # the rebuild already holds it
        heapq.heappush(heads, entry)

    def _negative_scan(self, now: float) -> tuple[int, Hashable]:
        """Full scan, used only while a negative-priority bucket exists: decay *raises* a negative
        priority to 0, so such a bucket's best entry is its oldest entry that has not decayed."""
        best = None
        ret = self.retention
        for prio, bucket in self.buckets.items():
            key = next(iter(bucket))
            last, seq = bucket[key]
            cand = (self._effective(prio, last, now), last, seq, prio, key)
            if prio < 0 and cand[0] == 0:
                for k, (lt, sq) in bucket.items():  # decayed entries form the oldest prefix
                    if now - lt < ret:
                        cand = (prio, lt, sq, prio, k)
                        break
            if best is None or cand[:3] < best[:3]:
                best = cand
        return best[3], best[4]
