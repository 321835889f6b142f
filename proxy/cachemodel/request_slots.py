"""Incremental per-request allocation on the block pool, as vLLM v1's KV cache manager does it.

Why apart from `block_pool.py`: `BlockPool.allocate` takes a request's whole KV at once (the
replay's request-granularity model); the step scheduler instead grows a request block by block
(`vllm/v1/core/kv_cache_manager.py: KVCacheManager.allocate_slots`):
- `extend(req, hits, n_new)`: touch the prefix-hit blocks (`BlockPool.touch`: ref +1, out of the
  free queue), then take `n_new` blocks from the free queue head (`get_new_blocks`, evicting cached
  ones). All or nothing: it fails (returns False, nothing changed) when `n_new` plus the hits that
  sit in the free queue exceed the free blocks (`get_num_blocks_to_allocate` counts
  `num_evictable_computed_blocks`; `allocate_slots` returns None).
- `cache(req, chain)`: give the request's blocks their hashes once full (`cache_full_blocks`,
  called by `allocate_slots` for `min(computed + new, num_tokens)` tokens), so other requests hit on
  them while this one still runs. A hash already cached elsewhere leaves this block unhashed (vLLM
  keeps both; only one is ever returned by a lookup).
- freeing is `BlockPool.free` (reverse order, so the tail is evicted first).
A mixin of `BlockPool`, which owns the attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from proxy.cachemodel.free_slots import FreeSlots


class RequestSlots(FreeSlots):
    """`extend` / `cache` / `held_blocks` for `BlockPool`."""

    _ref: dict[Hashable, int]
    _held: dict[Hashable, list]
    _cached_upto: dict[Hashable, int]
    _empty: int
    _anon: int
    _times: dict[Hashable, tuple[float, float]] | None
    time_samples: list[tuple[str, float]]
    listener: Callable[[str, list], None] | None
    _take_slot: Callable[[float], None]  # BlockPool's
    version: int

    def num_free(self) -> int:
        """Blocks an allocation can take now (vLLM `BlockPool.get_num_free_blocks`)."""
        return self._empty + self._free_len()

    def held_blocks(self, req_id: Hashable) -> int:
        keys = self._held.get(req_id)
        return len(keys) if keys is not None else 0

    def fits(self, hits: Sequence[Hashable], n_hits: int, n_new: int) -> bool:
        """Whether `n_new` blocks plus the first `n_hits` of `hits` (those in the free queue count)
        could be taken now: vLLM's `get_num_blocks_to_allocate` against `get_num_free_blocks`."""
        ref = self._ref
        evictable = 0
        for i in range(n_hits):
            if ref[hits[i]] == 0:
                evictable += 1
        return n_new + evictable <= self._empty + self._free_len()

    def extend(self, req_id: Hashable, hits: Sequence[Hashable], n_new: int, now: float, priority: int = 0) -> bool:
        ref = self._ref
        evictable = 0
        for h in hits:
            if ref[h] == 0:
                evictable += 1
        if n_new + evictable > self._empty + self._free_len():
            return False
        keys = self._held.get(req_id)
        if keys is None:
            keys = self._held[req_id] = []
            self._cached_upto[req_id] = 0
        times = self._times
        for h in hits:
            r = ref[h]
            if r == 0:
                self._remove_free(h)
            ref[h] = r + 1
            self._bump(h, priority, now)
            keys.append(h)
            if times is not None:
                born, last = times.get(h, (now, now))
                self.time_samples.append(("reuse_gap", now - last))
                times[h] = (born, now)
        for _ in range(n_new):
            self._take_slot(now)
            self._anon -= 1
            keys.append(self._anon)
            self._bump(self._anon, priority, now, new=True)
        return True

    def cache(self, req_id: Hashable, chain: Sequence[Hashable], now: float, upto: int | None = None) -> None:
        """Hash the request's full blocks: block i gets `chain[i]` (i < `upto`, default len(chain))."""
        keys = self._held.get(req_id)
        if keys is None:
            return
        start = self._cached_upto[req_id]
        end = min(len(chain) if upto is None else min(upto, len(chain)), len(keys))
        if end <= start:
            return
        ref = self._ref
        stored = []
        for i in range(start, end):
            k = keys[i]
            if k in ref:  # a hit block (already hashed)
                continue
            h = chain[i]
            if h in ref:  # cached by another request meanwhile: this block stays a duplicate
                continue
            self._meta[h] = self._meta.pop(k, (0, now))
            ref[h] = 1
            keys[i] = h
            stored.append(h)
            if self._times is not None:
                self._times[h] = (now, now)
        self._cached_upto[req_id] = end
        if stored:
            self.version += 1  # new hits: a waiting request may now fit
            if self.listener is not None:
                self.listener("stored", stored)
