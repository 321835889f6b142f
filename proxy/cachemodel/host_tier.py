"""The host-memory (CPU) tier of the simulated engine: vLLM's native KV offloading, modelled.

Why its own object: the sim engine, the replay and the tests need one answer to "which blocks of
this prefix could be *loaded* instead of recomputed?", with explicit `now`-free, deterministic
bookkeeping, exactly like `BlockPool` for the GPU tier.

Behaviour (vLLM v1 `OffloadingConnector` with the CPU backend, `--kv-offloading-backend native
--kv-offloading-size GiB`):
- write-through, not write-on-evict: once a request's full blocks are computed the connector
  stores them GPU→CPU (blocks already in the CPU tier are not stored again; they are only
  refreshed). A block therefore usually lives in both tiers, and a GPU eviction moves nothing;
- the CPU tier is an LRU of its own (vLLM 0.32 `CPUOffloadingManager` with its default
  `cache_policy="lru"` and `store_threshold=1`, i.e. every computed block is offered for storing;
  "arc" and reuse-gated stores are not modelled): storing or loading a block makes it most recent;
  storing into a full tier evicts its least recently used blocks;
- on admission the scheduler asks the connector how many blocks *after* the local (GPU) prefix
  hit are in the CPU tier (`get_num_new_matched_tokens`): the longest run of consecutive blocks.
  Those are loaded CPU→GPU asynchronously (the request waits in WAITING_FOR_REMOTE_KVS) instead of
  being prefilled; `cached_tokens` in the usage then counts local hits *and* loaded tokens, as
  vLLM's `num_cached_tokens` does.
- LMCache-style `pin`: a pinned block is never evicted from the tier (the controller's `/pin`).

Counters are blocks: `lookups` (blocks asked for after the GPU hit), `hits` (blocks found),
`stores` (blocks written GPU→CPU), `loads` (blocks read CPU→GPU), `evictions`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TierStats:
    capacity: int
    used: int
    lookups: int
    hits: int
    stores: int
    loads: int
    evictions: int
    pinned: int

    @property
    def usage(self) -> float:
        """Share of the tier's blocks in use (vLLM `kv_offload_cpu_cache_usage_perc`, 0..1)."""
        return self.used / self.capacity if self.capacity else 0.0


class HostTier:
    """Fixed-capacity LRU of block hashes (head = next victim)."""

    def __init__(self, capacity_blocks: int):
        if capacity_blocks < 0:
            raise ValueError("capacity_blocks must be >= 0")
        self.capacity = int(capacity_blocks)
        self._lru: OrderedDict[Hashable, None] = OrderedDict()
        self._pinned: set[Hashable] = set()
        self.lookups = 0
        self.hits = 0
        self.stores = 0
        self.loads = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, h: Hashable) -> bool:
        return h in self._lru

    # ------------------------------------------------------------------ queries
    def match(self, hashes: Sequence[Hashable], start: int = 0, stop: int | None = None) -> int:
        """Consecutive blocks of `hashes[start:stop]` resident in the tier. No side effects."""
        lru = self._lru
        end = len(hashes) if stop is None else min(stop, len(hashes))
        n = 0
        for j in range(start, end):
            if hashes[j] not in lru:
                break
            n += 1
        return n

    def eviction_order(self) -> list:
        """Unpinned blocks in the order they would be evicted (tests and debugging)."""
        return [h for h in self._lru if h not in self._pinned]

    def stats(self) -> TierStats:
        return TierStats(
            self.capacity,
            len(self._lru),
            self.lookups,
            self.hits,
            self.stores,
            self.loads,
            self.evictions,
            len(self._pinned),
        )

    # ------------------------------------------------------------------ lifecycle
    def lookup(self, hashes: Sequence[Hashable], start: int, stop: int | None = None) -> int:
        """The scheduler's question at admission: blocks after the GPU hit (`start`) that can be
        loaded. Counts the lookup; touches nothing (a load does)."""
        end = len(hashes) if stop is None else min(stop, len(hashes))
        n = self.match(hashes, start, end)
        self.lookups += max(end - start, 0)
        self.hits += n
        return n

    def load(self, hashes: Sequence[Hashable]) -> None:
        """Blocks read CPU→GPU: they become most recent."""
        lru = self._lru
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
                self.loads += 1

    def store(self, hashes: Sequence[Hashable]) -> int:
        """Write-through of computed blocks, in prefix order; returns blocks newly written (the
        bytes moved GPU→CPU). Present blocks are refreshed, new ones evict from the LRU head; a
        tier whose every block is pinned stores nothing more."""
        if self.capacity <= 0:
            return 0
        lru, pinned = self._lru, self._pinned
        new = 0
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
                continue
            if len(lru) >= self.capacity and not self._evict_one(pinned):
                break
            lru[h] = None
            new += 1
        self.stores += new
        return new

    def pin(self, hashes: Sequence[Hashable]) -> int:
        """LMCache `/pin`: keep these (resident) blocks; returns how many were pinned."""
        n = 0
        for h in hashes:
            if h in self._lru:
                self._pinned.add(h)
                n += 1
        return n

    def unpin(self, hashes: Sequence[Hashable]) -> None:
        for h in hashes:
            self._pinned.discard(h)

    def clear(self) -> None:
        self._lru.clear()
        self._pinned.clear()

    # ------------------------------------------------------------------ internals
    def _evict_one(self, pinned: set) -> bool:
        lru = self._lru
        if not pinned:
            lru.popitem(last=False)
            self.evictions += 1
            return True
        for h in lru:
            if h not in pinned:
                del lru[h]
                self.evictions += 1
                return True
        return False
