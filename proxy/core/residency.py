"""Residency shadow: an LRU model of the engine's prefix cache, fed by what the proxy forwards.

Why: a Touch only pays off for an anchor that is cached but about to fall off the LRU tail, and a
Warm only for one that is gone. The proxy cannot see the engine's cache directly, so it replays
every forwarded prompt (and every executed action) into this model. Engine adapters correct it
with ``on_engine_truth`` (capacity from metrics/config, a reset, or exact KV events when the
engine's block ids are the ones in the views, as in the simulator).

Touch order follows the engine: blocks are touched deepest-first so a prompt's first block ends
most recently used and the tail of a prefix is evicted first. With capacity 0 (unknown) nothing is
ever evicted and nothing counts as near eviction: the planner then only warms anchors it never
saw forwarded.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from .view import RequestView


class ResidencyShadow:
    def __init__(self, capacity_tokens: int = 0, near_eviction_fraction: float = 0.25) -> None:
        self.capacity_tokens = max(0, int(capacity_tokens))
        self.near_eviction_fraction = near_eviction_fraction
        self.usage_ratio: float | None = None
        self._blocks: OrderedDict[int, int] = OrderedDict()   # hash -> tokens; first = LRU end
        self._used = 0
        self._inserted = 0              # tokens inserted so far (drives tail-zone refresh)
        self._tail: set[int] = set()
        self._tail_at = -1              # _inserted when _tail was computed
        self.evicted_tokens = 0

    # --- feeding ----------------------------------------------------------------------------
    def on_forward(self, view: RequestView, now: float) -> int:
        """Record a forwarded prompt; returns the tokens of its prefix that were resident before."""
        hit = self.resident_prefix_tokens(view.block_hashes, view.block_tokens)
        self.touch(view.block_hashes, view.block_tokens)
        return hit

    def touch(self, hashes: Sequence[int], tokens: Sequence[int]) -> None:
        blocks = self._blocks
        for h, t in zip(reversed(hashes), reversed(tokens)):
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = t
                self._used += t
                self._inserted += t
        self._evict()

    def _evict(self) -> None:
        cap = self.capacity_tokens
        if cap <= 0:
            return
        blocks = self._blocks
        while self._used > cap and blocks:
            _, t = blocks.popitem(last=False)
            self._used -= t
            self.evicted_tokens += t

    # --- queries ----------------------------------------------------------------------------
    def resident_prefix(self, hashes: Sequence[int]) -> int:
        """Leading blocks of ``hashes`` that the shadow holds."""
        blocks = self._blocks
        n = 0
        for h in hashes:
            if h not in blocks:
                break
            n += 1
        return n

    def resident_prefix_tokens(self, hashes: Sequence[int], tokens: Sequence[int]) -> int:
        n = self.resident_prefix(hashes)
        return sum(tokens[:n])

    def near_eviction(self, hashes: Sequence[int]) -> bool:
        """True when any block of a resident prefix lies in the oldest fraction of the cache.

        The deepest block is evicted first, so it is the one checked; the tail zone is
        recomputed only after enough new tokens were inserted to have moved it noticeably.
        """
        if not hashes or self.capacity_tokens <= 0:
            return False
        zone = self.near_eviction_fraction * self.capacity_tokens
        if self._used < self.capacity_tokens - zone:
            return False                # cache not full enough for anything to be near the tail
        if self._tail_at < 0 or self._inserted - self._tail_at > zone / 4:
            self._refresh_tail(zone)
        return hashes[-1] in self._tail or hashes[0] in self._tail

    def _refresh_tail(self, zone: float) -> None:
        tail: set[int] = set()
        acc = 0
        # headroom left before the cache is full also protects the tail
        budget = zone - max(0, self.capacity_tokens - self._used)
        for h, t in self._blocks.items():
            if acc >= budget:
                break
            tail.add(h)
            acc += t
        self._tail = tail
        self._tail_at = self._inserted

    @property
    def used_tokens(self) -> int:
        return self._used

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, h: int) -> bool:
        return h in self._blocks

    # --- corrections from the engine ----------------------------------------------------------
    def on_engine_truth(self, *, capacity_tokens: int | None = None, capacity_blocks: int | None = None,
                        block_tokens: int | None = None, usage_ratio: float | None = None,
                        cleared: bool = False, stored: Iterable[int] = (), stored_tokens: int | None = None,
                        removed: Iterable[int] = ()) -> None:
        """Correct the shadow: capacity (tokens, or engine blocks × block size), a cache reset,
        or exact stored/removed block ids (only meaningful when they are the views' ids)."""
        if capacity_blocks is not None and block_tokens:
            capacity_tokens = int(capacity_blocks) * int(block_tokens)
        if capacity_tokens is not None and capacity_tokens >= 0:
            self.capacity_tokens = int(capacity_tokens)
            self._tail_at = -1
            self._evict()
        if usage_ratio is not None:
            self.usage_ratio = float(usage_ratio)
        if cleared:
            self._blocks.clear()
            self._used = 0
            self._tail.clear()
            self._tail_at = -1
        for h in removed:
            t = self._blocks.pop(h, None)
            if t is not None:
                self._used -= t
                self._tail.discard(h)
        per = int(stored_tokens if stored_tokens is not None else (block_tokens or 16))
        for h in stored:
            if h in self._blocks:
                self._blocks.move_to_end(h)
            else:
                self._blocks[h] = per
                self._used += per
                self._inserted += per
        self._evict()
