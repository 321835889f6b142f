"""A pure, vLLM-faithful model of an engine's prefix-cache block pool.

Why this shape: the live demo, the replay evaluator and the tests all need the *same* answer to
"would this request have hit?", so the cache model is a plain object with explicit `now` and no I/O.

Rules (vLLM v1 `KVCacheManager` / `FreeKVCacheBlockQueue`):
- the pool has `capacity_blocks` slots; a slot is empty, held (ref count > 0) or free-but-cached;
- a request's hit is the longest prefix of its block hashes that is resident;
- admitting a request first *touches* every resident block it names (ref count +1, out of the free
  queue, so the request cannot evict its own hits), then takes one slot per missing block from the
  head of the free queue (never-used slots first, then the least recently freed cached block);
- finishing a request drops its ref counts and appends its blocks to the free queue **deepest
  first**, so its tail is evicted before its prefix (the prefix ends most recent);
- blocks with ref count > 0 are never evicted; a request that cannot get enough slots gets `None`
  (the engine keeps it waiting, as vLLM does).

`eviction="priority"` is the SGLang-style variant (`--radix-eviction-policy priority`): among free
blocks the lowest priority goes first (ties: least recently used, deepest first); a block's priority
falls back to the default (0) once it has been idle for `retention_seconds`. A block keeps the
highest priority of the requests that touched it while that priority is still live.

Stats count blocks: `queries` (blocks asked for) and `hits` (prefix blocks found). The engine turns
these into token counters for its `/metrics`.

`listener` (optional) is called with ("stored", [hashes]) when hashed blocks become resident,
("removed", [hash]) when one is evicted and ("cleared", []) on reset: the raw material of vLLM's
KV events. `enable_block_times()` records vLLM's `--kv-cache-metrics` samples (idle before evict,
lifetime, reuse gap) in `time_samples`. With either set, `access()` takes the general (slower) path.

The free-slot order of both modes (which free block goes first, priority decay) is `free_slots.py`;
the step scheduler's block-by-block growth (`extend`, `cache`, vLLM `allocate_slots`) is `request_slots.py`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from proxy.cachemodel.free_queue import PriorityFreeQueue
from proxy.cachemodel.request_slots import RequestSlots

EVICTION_MODES = ("lru", "priority")


@dataclass(frozen=True, slots=True)
class PoolStats:
    """A snapshot of the pool's counters (blocks)."""

    capacity: int
    used: int  # slots not empty (held or free-but-cached)
    held: int  # slots with ref count > 0
    cached: int  # resident hashed blocks (held or free)
    queries: int
    hits: int
    evictions: int

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0

    @property
    def usage(self) -> float:
        """Share of slots held by running requests (vLLM's `kv_cache_usage_perc`, 0..1)."""
        return self.held / self.capacity if self.capacity else 0.0


class BlockPool(RequestSlots):
    """Fixed-capacity block pool with vLLM's free-queue order (or SGLang-style priority eviction)."""

    def __init__(self, capacity_blocks: int, eviction: str = "lru", retention_seconds: float = 300.0):
        if capacity_blocks < 0:
            raise ValueError("capacity_blocks must be >= 0")
        if eviction not in EVICTION_MODES:
            raise ValueError(f"eviction must be one of {EVICTION_MODES}, got {eviction!r}")
        self.capacity = int(capacity_blocks)
        self.eviction = eviction
        self.retention_seconds = float(retention_seconds)
        self._ref: dict[Hashable, int] = {}  # resident hashed block -> ref count
        self._free: OrderedDict = OrderedDict()  # lru: free slots (hash or anon key), head = next victim
        self._pq = PriorityFreeQueue(self.retention_seconds) if eviction == "priority" else None
        self._meta: dict[Hashable, tuple[int, float]] = {}  # priority: key -> (prio, last access)
        self._access_seq = 0
        self._empty = self.capacity  # never-used slots (the head of vLLM's queue)
        self._held: dict[Hashable, list] = {}  # req_id -> keys it holds, in prefix order
        self._cached_upto: dict[Hashable, int] = {}  # req_id -> leading blocks `cache()` has seen
        self._anon = 0  # counter for unhashed (partial/decode) blocks
        self.listener: Callable[[str, list], None] | None = None
        self._times: dict[Hashable, tuple[float, float]] | None = None  # hash -> (stored at, last use)
        self.time_samples: list[tuple[str, float]] = []
        self.queries = 0
        self.hits = 0
        self.evictions = 0
        self.version = 0  # bumped whenever an allocation that failed could now succeed (free, new hashes, reset)

    # ------------------------------------------------------------------ queries
    def match_prefix(self, hashes: Sequence[Hashable], limit: int | None = None) -> int:
        """Number of leading blocks resident in the pool (at most `limit`). No side effects."""
        ref = self._ref
        n = 0
        stop = len(hashes) if limit is None else min(limit, len(hashes))
        while n < stop and hashes[n] in ref:
            n += 1
        return n

    def contains(self, h: Hashable) -> bool:
        return h in self._ref

    def stats(self) -> PoolStats:
        held = self.capacity - self._empty - self._free_len()
        return PoolStats(
            self.capacity, self.capacity - self._empty, held, len(self._ref), self.queries, self.hits, self.evictions
        )

    def free_slots(self) -> int:
        """Slots a new allocation could take right now (empty + free queue)."""
        return self._empty + self._free_len()

    def admissible(self, hashes: Sequence[Hashable]) -> int:
        """Leading blocks of ``hashes`` one allocation could hold right now: its hits always (they
        leave the free queue), its misses while empty or free slots remain. What vLLM's scheduler
        would admit of a prompt beside the requests already running (the replay's running-set pin)."""
        ref = self._ref
        room = self._empty + self._free_len()
        seen: set = set()
        n = 0
        for h in hashes:
            if h not in seen:
                seen.add(h)
                r = ref.get(h)
                if r is None:
                    if room <= 0:
                        break
                    room -= 1
                elif r == 0:
                    room -= 1  # a free cached block pinned: one slot fewer for the misses
            n += 1
        return n

    def eviction_order(self, now: float = 0.0) -> list:
        """Free blocks in the order they would be evicted (for tests and debugging; O(n log n))."""
        if self._pq is None:
            return list(self._free)
        return self._pq.ordered(now)

    def enable_block_times(self) -> None:
        """Record ("idle_before_evict" | "lifetime" | "reuse_gap", seconds) samples per block."""
        self._times = {}

    def drain_time_samples(self) -> list[tuple[str, float]]:
        out, self.time_samples = self.time_samples, []
        return out

    # ------------------------------------------------------------------ request lifecycle
    def allocate(
        self,
        req_id: Hashable,
        hashes: Sequence[Hashable],
        now: float,
        priority: int = 0,
        extra_blocks: int = 0,
        max_hit_blocks: int | None = None,
    ) -> int | None:
        """Pin the hits, allocate the misses (+ `extra_blocks` unhashed slots for a partial block or
        decode). Returns the prefix-hit block count, or None (nothing changed) when it does not fit.
        `max_hit_blocks` caps the reported hit (vLLM recomputes at least the last prompt token)."""
        if req_id in self._held:
            raise ValueError(f"request {req_id!r} already holds blocks")
        hit = self.match_prefix(hashes)
        if max_hit_blocks is not None:
            hit = min(hit, max_hit_blocks)
        ref = self._ref
        seen: set = set()
        need = extra_blocks
        touched_free = 0
        for h in hashes:
            if h in seen:
                continue
            seen.add(h)
            r = ref.get(h)
            if r is None:
                need += 1
            elif r == 0:
                touched_free += 1
        if need > self._empty + self._free_len() - touched_free:
            return None
        keys: list = []
        done: set = set()
        for h in hashes:  # touch resident blocks first: they cannot be evicted
            if h in done:
                continue
            r = ref.get(h)
            if r is not None:
                if r == 0:
                    self._remove_free(h)
                ref[h] = r + 1
                self._bump(h, priority, now)
                done.add(h)
                if self._times is not None:
                    born, last = self._times.get(h, (now, now))
                    self.time_samples.append(("reuse_gap", now - last))
                    self._times[h] = (born, now)
        stored = []
        for h in hashes:  # then take slots for the misses
            if h in done:
                continue
            done.add(h)
            self._take_slot(now)
            ref[h] = 1
            self._bump(h, priority, now, new=True)
            stored.append(h)
            if self._times is not None:
                self._times[h] = (now, now)
        if stored and self.listener is not None:
            self.listener("stored", stored)
        keys = list(dict.fromkeys(hashes))
        for _ in range(extra_blocks):
            self._take_slot(now)
            self._anon -= 1
            keys.append(self._anon)
            self._bump(self._anon, priority, now, new=True)
        self._held[req_id] = keys
        self.queries += len(hashes)
        self.hits += hit
        return hit

    def free(self, req_id: Hashable, now: float, tail_hashes: Sequence[Hashable] = ()) -> None:
        """Unpin a request's blocks; the free queue receives them deepest first.
        `tail_hashes` names full blocks the request produced while running (decode): they replace
        its unhashed slots in order, so the next turn can hit on the generated text as in vLLM."""
        keys = self._held.pop(req_id, None)
        self._cached_upto.pop(req_id, None)
        if keys is None:
            return
        self.version += 1
        if tail_hashes:
            keys = self._label_tail(keys, tail_hashes, now)
        ref = self._ref
        for key in reversed(keys):
            r = ref.get(key)
            if r is None:  # unhashed slot: freed as an empty-but-queued block
                self._push_free(key, now)
                continue
            r -= 1
            ref[key] = r
            if r == 0:
                self._push_free(key, now)
                if self._times is not None and key in self._times:
                    self._times[key] = (self._times[key][0], now)

    def access(self, hashes: Sequence[Hashable], now: float, priority: int = 0) -> int:
        """Allocate + free at once (request granularity): returns the prefix-hit block count.
        A request longer than the pool keeps only its first `capacity - held` blocks."""
        if self._held or self.listener is not None or self._times is not None:
            return self._access_general(hashes, now, priority)
        if len(set(hashes)) != len(hashes):  # chained hashes never repeat; stay exact if they do
            hashes = list(dict.fromkeys(hashes))
        if self._pq is not None:
            return self._access_priority(hashes, now, priority)
        ref = self._ref
        free = self._free
        hit = 0
        for h in hashes:
            if h not in ref:
                break
            hit += 1
        n = len(hashes)
        self.queries += n
        self.hits += hit
        if n > self.capacity:
            hashes = hashes[: self.capacity]
        misses = 0
        for h in hashes:  # touch: pull resident blocks out of the free queue
            if h in ref:
                del free[h]
                del ref[h]
            else:
                misses += 1
        take_empty = min(misses, self._empty)
        self._empty -= take_empty
        for _ in range(misses - take_empty):  # evict from the head
            victim, _v = free.popitem(last=False)
            ref.pop(victim, None)
            self.evictions += 1
        for h in reversed(hashes):  # deepest first: the prefix ends most recent
            free[h] = None
            ref[h] = 0
        return hit

    def reset(self) -> bool:
        """Drop every free cached block (vLLM `/reset_prefix_cache`). Refuses (False) while any
        request holds blocks, as vLLM and SGLang's `/flush_cache` do."""
        if self._held:
            return False
        self.version += 1
        self._ref.clear()
        self._free.clear()
        if self._pq is not None:
            self._pq.clear()
        self._meta.clear()
        self._empty = self.capacity
        if self._times is not None:
            self._times.clear()
        if self.listener is not None:
            self.listener("cleared", [])
        return True

    # ------------------------------------------------------------------ internals
    def _access_general(self, hashes: Sequence[Hashable], now: float, priority: int) -> int:
        room = self._empty + self._free_len()
        uniq = list(dict.fromkeys(hashes))
        if len(uniq) > room:
            uniq = uniq[: max(room, 0)]
        self._access_seq += 1
        key = ("__access__", self._access_seq)
        hit = self.allocate(key, uniq, now, priority)
        if hit is None:  # only possible when everything is pinned
            self.queries += len(hashes)
            return 0
        self.queries += len(hashes) - len(uniq)
        self.free(key, now)
        return hit

    def _access_priority(self, hashes: Sequence[Hashable], now: float, priority: int) -> int:
        """`access()` for priority mode with nothing held: allocate + free in one pass."""
        ref, meta, pq, ret = self._ref, self._meta, self._pq, self.retention_seconds
        assert pq is not None, "access() dispatches here only in priority mode"
        hit = 0
        for h in hashes:
            if h not in ref:
                break
            hit += 1
        self.queries += len(hashes)
        self.hits += hit
        if len(hashes) > self.capacity:
            hashes = hashes[: self.capacity]
        prios = []
        misses = 0
        for h in hashes:  # touch: out of the free queue, priority = max(live, new)
            if h in ref:
                p, last = meta[h]
                pq.remove(h, p)
                del ref[h]
                if p != 0 and now - last >= ret:
                    p = 0
                prios.append(p if p > priority else priority)
            else:
                misses += 1
                prios.append(priority)
        take = min(misses, self._empty)
        self._empty -= take
        if misses > take:
            for victim in pq.pop_victims(misses - take, now):
                if victim in ref:
                    del ref[victim]
                    self.evictions += 1
                meta.pop(victim, None)
        for h, p in zip(reversed(hashes), reversed(prios)):  # deepest first
            meta[h] = (p, now)
            pq.push(h, p, now)
            ref[h] = 0
        return hit

    def _take_slot(self, now: float) -> None:
        if self._empty > 0:
            self._empty -= 1
            return
        victim = self._pop_victim(now)
        if victim in self._ref:
            del self._ref[victim]
            self.evictions += 1
            if self._times is not None:
                born, last = self._times.pop(victim, (now, now))
                self.time_samples.append(("idle_before_evict", now - last))
                self.time_samples.append(("lifetime", now - born))
            if self.listener is not None:
                self.listener("removed", [victim])
        self._meta.pop(victim, None)

    def _label_tail(self, keys: list, tail_hashes: Sequence[Hashable], now: float) -> list:
        """Pair the request's unhashed slots, in order, with the full blocks it generated."""
        ref = self._ref
        anon_pos = [i for i, k in enumerate(keys) if k not in ref]
        out = list(keys)
        stored = []
        for pos, h in zip(anon_pos, tail_hashes):
            if h in ref:  # already cached elsewhere: this slot stays an unhashed duplicate
                continue
            self._meta[h] = self._meta.pop(out[pos], (0, now))
            ref[h] = 1
            out[pos] = h
            stored.append(h)
            if self._times is not None:
                self._times[h] = (now, now)
        if stored and self.listener is not None:
            self.listener("stored", stored)
        return out
