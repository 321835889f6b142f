"""Residency shadow: an LRU model of the engine's prefix cache, fed by what the proxy forwards.

Why: a Touch only pays off for an anchor that is cached but about to fall off the LRU tail, and a
Warm only for one that is gone. The proxy cannot see the engine's cache directly, so it replays
every forwarded prompt (and every executed action) into this model. Engine adapters correct it
with ``on_engine_truth`` (capacity from metrics/config, a reset, or exact KV events when the
engine's block ids are the ones in the views, as in the simulator).

Cost control: a long prompt has hundreds of 16-token blocks, and touching each one would dominate
the request path. Because a prefix's deeper blocks are always evicted before its shallower ones
(deepest-first touch order), residency along a chain is monotone, so the shadow only tracks every
``stride``-th block (plus the anchor's last block), each entry carrying the tokens of the segment
it closes, and finds a prompt's resident prefix by binary search. A prompt's partial tail (fewer
than ``stride`` blocks past its last tracked block) is not modelled: tracking it would charge the
same tokens twice once a longer prompt covers them with a stride entry. So the strided shadow
under-counts by at most stride−1 blocks per prompt and answers "resident" to stride granularity
(``fully_resident``).
``stride=0`` (default) picks the stride from the first view seen: ``stride_tokens`` (256) divided
by its largest block, so chat views (16-token blocks) track every 16th block and trace views
(512-token blocks) every block. ``stride=1`` gives an exact block-level LRU.

Touch order follows the engine: blocks are touched deepest-first so a prompt's first block ends
most recently used and the tail of a prefix is evicted first. With capacity 0 (unknown) nothing is
evicted for capacity (only beyond ``max_entries``, a memory bound) and nothing counts as near
eviction: the planner then only warms anchors it never saw forwarded.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import accumulate, islice
from operator import itemgetter

from .view import RequestView

_TOK = itemgetter(0)


class ResidencyShadow:
    def __init__(self, capacity_tokens: int = 0, near_eviction_fraction: float = 0.25, stride: int = 1,
                 stride_tokens: int = 256, max_entries: int = 500_000, horizon_s: float = 0.0) -> None:
        self.capacity_tokens = max(0, int(capacity_tokens))
        self.near_eviction_fraction = near_eviction_fraction
        self.stride = max(0, int(stride))         # 0 = auto, fixed at the first view
        self.stride_tokens = max(1, int(stride_tokens))
        self.epoch = 0                            # bumped by engine truth (invalidates verdicts)
        self.max_entries = max(1, int(max_entries))   # memory bound, also while capacity is unknown
        self.usage_ratio: float | None = None
        # hash -> (tokens, stamp); first = LRU end; LRU order == stamp order
        self._blocks: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self._seq = 0
        self._used = 0
        self._inserted = 0              # tokens inserted so far (drives tail-zone refresh)
        self._tail_stamp = -1           # entries with stamp <= this are in the tail zone
        self._tail_at = -1              # _inserted when the tail zone was computed
        self._tail_zone = 0.0
        self.horizon_s = float(horizon_s)   # >0: the tail zone grows to what arrives in this long
        self.insert_rate: float | None = None   # tokens inserted per second (EWMA, client traffic)
        self._rate_t: float | None = None
        self._rate_ins = 0
        self.evicted_tokens = 0

    # --- feeding ----------------------------------------------------------------------------
    def on_forward(self, view: RequestView, now: float, anchor_blocks: int | None = None) -> int:
        """Record a forwarded prompt; returns the tokens of its prefix that were resident before.
        ``anchor_blocks`` (default: the view's) makes sure the anchor's last block is tracked."""
        if anchor_blocks is None:
            anchor_blocks = view.anchor_blocks
        if self._rate_t is None:
            self._rate_t, self._rate_ins = now, self._inserted
        elif now - self._rate_t >= 1.0:
            r = (self._inserted - self._rate_ins) / (now - self._rate_t)
            self.insert_rate = r if self.insert_rate is None else 0.7 * self.insert_rate + 0.3 * r
            self._rate_t, self._rate_ins = now, self._inserted
        if self.stride == 0 and view.block_tokens:
            self.stride = max(1, self.stride_tokens // max(1, max(view.block_tokens)))
        hashes, seg = self._sample(view.block_hashes, view.block_tokens, anchor_blocks - 1)
        blocks = self._blocks
        # residency along a chain is monotone: binary-search the last resident tracked block
        lo, hi = 0, len(hashes)
        while lo < hi:
            mid = (lo + hi) // 2
            if hashes[mid] in blocks:
                lo = mid + 1
            else:
                hi = mid
        hit = sum(seg[:lo])
        self._touch_sampled(hashes, seg)
        return hit

    def touch(self, hashes: Sequence[int], tokens: Sequence[int], anchor_blocks: int = 0) -> None:
        """Mark a whole prompt (or an executed action's blocks) most recently used."""
        sh, seg = self._sample(hashes, tokens, anchor_blocks - 1)
        self._touch_sampled(sh, seg)

    def _sample(self, hashes: Sequence[int], tokens: Sequence[int], extra: int = -1
                ) -> tuple[Sequence[int], Sequence[int]]:
        """(tracked hashes, tokens of the segment each closes), in prefix order."""
        k = self.stride
        n = len(hashes)
        if k <= 1 or n == 0:
            return hashes, tokens
        pos = list(range(k - 1, n, k))
        if 0 <= extra < n and extra % k != k - 1:
            pos.append(extra)
            pos.sort()
        if not pos:
            return (), ()
        if n >= 2 and tokens[1:].count(tokens[1]) == n - 1:
            # uniform blocks after the first (the common case): no per-block arithmetic
            t = tokens[1]
            seg = []
            prev = -1
            for i in pos:
                seg.append((i - prev) * t)
                prev = i
            seg[0] += tokens[0] - t
            return [hashes[i] for i in pos], seg
        cum = list(accumulate(tokens))
        seg = []
        prev = 0
        for i in pos:
            c = cum[i]
            seg.append(c - prev)
            prev = c
        return [hashes[i] for i in pos], seg

    def _touch_sampled(self, hashes: Sequence[int], tokens: Sequence[int]) -> None:
        blocks = self._blocks
        seq = self._seq
        added = 0
        for h, t in zip(reversed(hashes), reversed(tokens)):
            seq += 1
            old = blocks.get(h)
            if old is not None:
                blocks[h] = (old[0], seq)
                blocks.move_to_end(h)
            else:
                blocks[h] = (t, seq)
                added += t
        self._seq = seq
        self._used += added
        self._inserted += added
        self._evict()

    def _evict(self) -> None:
        cap = self.capacity_tokens
        blocks = self._blocks
        if cap <= 0:
            while len(blocks) > self.max_entries:
                _, (t, _s) = blocks.popitem(last=False)
                self._used -= t
            return
        while (self._used > cap or len(blocks) > self.max_entries) and blocks:
            _, (t, _s) = blocks.popitem(last=False)
            self._used -= t
            self.evicted_tokens += t

    # --- queries ----------------------------------------------------------------------------
    def resident_prefix(self, hashes: Sequence[int]) -> int:
        """Leading blocks of ``hashes`` the shadow holds (to the last tracked resident block)."""
        blocks = self._blocks
        n = len(hashes)
        k = self.stride
        if k <= 1:
            i = 0
            for h in hashes:
                if h not in blocks:
                    break
                i += 1
            return i
        good = 0
        for i in range(k - 1, n, k):
            if hashes[i] not in blocks:
                return good
            good = i + 1
        if n and hashes[n - 1] in blocks:      # an anchor's tracked last block
            return n
        return good

    def fully_resident(self, hashes: Sequence[int]) -> bool:
        """Every tracked block of this prefix is held (exact when stride is 1)."""
        return self.resident_prefix(hashes) > len(hashes) - max(1, self.stride)

    def resident_prefix_tokens(self, hashes: Sequence[int], tokens: Sequence[int]) -> int:
        n = self.resident_prefix(hashes)
        return sum(tokens[:n])

    def near_eviction(self, hashes: Sequence[int]) -> bool:
        """True when a resident prefix's deepest block lies in the oldest fraction of the cache.

        The deepest block is evicted first, so it (and the first tracked block) is what is
        checked. The tail zone is a stamp threshold recomputed only after another zone's worth of
        tokens was inserted, so between refreshes it can under-report by that much (an anchor can
        slip out of a stale zone early, never into a wrong one).
        """
        if not hashes or self.capacity_tokens <= 0:
            return False
        zone = self.zone_tokens()
        if self._used < self.capacity_tokens - zone:
            return False                # cache not full enough for anything to be near the tail
        if (self._tail_at < 0 or self._inserted - self._tail_at > zone
                or abs(zone - self._tail_zone) > 0.25 * zone):
            self._refresh_tail(zone)
        blocks = self._blocks
        limit = self._tail_stamp
        for h in (hashes[-1], hashes[min(self.stride, len(hashes)) - 1]):
            e = blocks.get(h)
            if e is not None and e[1] <= limit:
                return True
        return False

    def zone_tokens(self) -> float:
        """Size of the tail zone: a fixed share of capacity, or (with a horizon) what the client
        traffic will insert within ``horizon_s``, whichever is larger, at most the capacity."""
        cap = self.capacity_tokens
        zone = self.near_eviction_fraction * cap
        if self.horizon_s > 0 and self.insert_rate:
            zone = min(float(cap), max(zone, self.insert_rate * self.horizon_s))
        return zone

    def _refresh_tail(self, zone: float) -> None:
        """Find the stamp closing the oldest ``zone`` tokens (C-level scan of the LRU end)."""
        budget = zone - max(0, self.capacity_tokens - self._used)   # free room also protects
        self._tail_at = self._inserted
        self._tail_zone = zone
        blocks = self._blocks
        if budget <= 0 or not blocks:
            self._tail_stamp = -1
            return
        avg = max(1.0, self._used / len(blocks))
        n = int(1.25 * budget / avg) + 16
        while True:
            head = list(islice(blocks.values(), n))
            cum = list(accumulate(map(_TOK, head)))
            i = bisect_left(cum, budget)
            if i < len(head) or len(head) < n:
                self._tail_stamp = head[min(i, len(head) - 1)][1]
                return
            n *= 2

    def safe_until(self) -> float:
        """A "resident and not near eviction" verdict stays valid until this many tokens were
        inserted (a quarter of the tail zone from now); the planner memoises verdicts with it."""
        if self.capacity_tokens <= 0:
            return float("inf")
        return self._inserted + self.zone_tokens() / 4

    @property
    def inserted_tokens(self) -> int:
        return self._inserted

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
        or exact stored/removed block ids (only meaningful when they are the views' ids; with
        stride > 1 untracked ids are simply not found)."""
        if capacity_blocks is not None and block_tokens:
            capacity_tokens = int(capacity_blocks) * int(block_tokens)
        self.epoch += 1
        if capacity_tokens is not None and capacity_tokens >= 0:
            self.capacity_tokens = int(capacity_tokens)
            self._tail_at = -1
        if usage_ratio is not None:
            self.usage_ratio = float(usage_ratio)
        if cleared:
            self._blocks.clear()
            self._used = 0
            self._tail_at = -1
        for h in removed:
            e = self._blocks.pop(h, None)
            if e is not None:
                self._used -= e[0]
        stored = list(stored)
        if stored:
            per = int(stored_tokens if stored_tokens is not None else (block_tokens or 16))
            self._touch_sampled(stored, [per] * len(stored))   # prefix order: first ends most recent
        self._evict()
