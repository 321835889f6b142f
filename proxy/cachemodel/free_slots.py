"""The free-slot order of the block pool: which free block an allocation evicts next.

Why apart from `block_pool.py`: the pool's rules (ref counts, touch-before-allocate, deepest-first
freeing) are the same in both eviction modes; only this order differs. `lru` (vLLM's
`FreeKVCacheBlockQueue`) is an OrderedDict whose head is the next victim; `priority` (SGLang
`--radix-eviction-policy priority`) is a `PriorityFreeQueue` keyed by a block's effective priority,
which falls back to 0 once the block has been idle `retention_seconds`. A mixin of `BlockPool`, so
the hot paths stay plain method calls on the pool's own state.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from proxy.cachemodel.free_queue import PriorityFreeQueue


class FreeSlots:
    """Free-queue operations for `BlockPool` (which owns these attributes)."""

    eviction: str
    retention_seconds: float
    _free: OrderedDict
    _pq: PriorityFreeQueue | None
    _meta: dict[Hashable, tuple[int, float]]

    def _free_len(self) -> int:
        return len(self._free) if self._pq is None else len(self._pq)

    def _effective(self, prio: int, last: float, now: float) -> int:
        if prio != 0 and now - last >= self.retention_seconds:
            return 0
        return prio

    def _bump(self, key: Hashable, priority: int, now: float, new: bool = False) -> None:
        if self.eviction == "lru":
            return
        if new or key not in self._meta:
            self._meta[key] = (priority, now)
            return
        prio, last = self._meta[key]
        self._meta[key] = (max(self._effective(prio, last, now), priority), now)

    def _push_free(self, key: Hashable, now: float) -> None:
        if self._pq is None:
            self._free[key] = None
            return
        prio, last = self._meta.get(key, (0, now))
        if prio != 0 and now - last >= self.retention_seconds:
            prio = 0
        self._meta[key] = (prio, now)  # finishing counts as an access (SGLang insert)
        self._pq.push(key, prio, now)

    def _remove_free(self, key: Hashable) -> None:
        if self._pq is None:
            del self._free[key]
        else:
            self._pq.remove(key, self._meta[key][0])

    def _pop_victim(self, now: float) -> Hashable:
        if self._pq is None:
            return self._free.popitem(last=False)[0]
        return self._pq.pop_victim(now)
