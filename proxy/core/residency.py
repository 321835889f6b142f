"""Residency shadow: an LRU model of the engine's prefix cache, fed by what the proxy forwards.

Why: a Touch only pays off for an anchor that is cached but about to fall off the LRU tail, and a
Warm only for one that is gone. The proxy cannot see the engine's cache directly, so it replays
every forwarded prompt (and every executed action) into this model. Engine adapters correct it
with ``on_engine_truth`` (capacity from metrics/config, a reset, or exact KV events when the
engine's block ids are the ones in the views, as in the simulator).

Cost control: a long prompt has hundreds of 16-token blocks, and touching each one would dominate
the request path. Because a prefix's deeper blocks are always evicted before its shallower ones
(deepest-first touch order), residency along a chain is monotone, so the shadow only tracks every
``stride``-th block, plus the anchor's last block and the prompt's own last block, each entry
carrying the tokens of the segment it closes, and finds a prompt's resident prefix by binary
search. The last block matters: untracked, every prompt's tail (up to stride−1 blocks) went
uncharged (~10% of a demo agent's context), the shadow held more than the engine's cache, and
called tool-paused contexts resident that the engine had evicted (issue 25). When a longer prompt of the
same chain covers an earlier prompt's tail with its new entries, that tail entry is dropped
(``_absorb``), so a session's growing prompts are charged once; a shorter prompt after a longer
one (a truncated or re-rendered history) can still charge its tail twice until it ages out. The
shadow answers "resident" to stride granularity (``fully_resident``).
``stride=0`` (default) picks the stride from the first view seen: ``stride_tokens`` (256) divided by its largest
block, so chat views (16-token blocks) track every 16th block and trace views (512-token blocks) every block.
``stride=1`` gives an exact block-level LRU.

The LRU itself is two int dicts (hash -> tokens, hash -> stamp of its last touch) plus an append-only queue of
stamps and hashes in touch order (parallel int lists: no per-touch objects for the garbage collector to trace),
with stale queue entries skipped lazily: eviction pops the queue's head, and a second cursor walks the queue to
keep "the oldest zone's worth of tokens" current, so each entry is passed by each pointer once and no step
rescans the cache (no latency spikes on the request path).

What the planner asks of the shadow (resident prefix, near eviction, the verdict of a candidate)
is in residency_queries.py; this module feeds and evicts.

Touch order follows the engine: blocks are touched deepest-first so a prompt's first block ends
most recently used and the tail of a prefix is evicted first. With capacity 0 (unknown) nothing is
evicted for capacity (only beyond ``max_entries``, a memory bound) and nothing counts as near
eviction: the planner then only warms anchors it never saw forwarded.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate, compress
from operator import eq, itemgetter
from typing import Any

from .residency_queries import ShadowQueries
from .session_residency import SessionResidency
from .turnover import Turnover
from .view import RequestView

_COMPACT_SLACK = 4096
_SHAPE_CACHE = 4096  # memoised sampling shapes (prompt length, anchor end)


class ResidencyShadow(ShadowQueries):
    def __init__(
        self,
        capacity_tokens: int = 0,
        near_eviction_fraction: float = 0.25,
        stride: int = 1,
        stride_tokens: int = 256,
        max_entries: int = 500_000,
        horizon_s: float = 0.0,
    ) -> None:
        self.capacity_tokens = max(0, int(capacity_tokens))
        self.near_eviction_fraction = near_eviction_fraction
        self.stride = max(0, int(stride))  # 0 = auto, fixed at the first view
        self.stride_tokens = max(1, int(stride_tokens))
        self.epoch = 0  # bumped by engine truth (invalidates verdicts)
        self.max_entries = max(1, int(max_entries))  # memory bound, also while capacity is unknown
        self.usage_ratio: float | None = None
        self._tok: dict[int, int] = {}  # hash -> tokens of the segment it closes
        self._stamp: dict[int, int] = {}  # hash -> stamp of its last touch (membership)
        self._qs: array[int] = array("q")  # queue in touch order: stamps (8 B each, no int objects) ...
        self._qh: list[int] = []  # ... and hashes (the dicts' objects); stale entries kept until passed
        self._head = 0  # queue index of the LRU end (entries before it are gone)
        self._cur = 0  # live entries in queue[_head:_cur] form the tail zone
        self._zone_tok = 0  # their tokens
        self._seq = 0
        self._used = 0
        self._inserted = 0  # tokens inserted so far
        self.horizon_s = float(horizon_s)  # >0: the tail zone grows to what arrives in this long
        self.rates = Turnover()  # insert rate, request rate, tail reuse (client traffic)
        self.evicted_tokens = 0
        self.last_forward_at: float | None = None
        self._zone_hits = self._forwards = 0
        # (blocks, extra, stride) -> (positions, gather, segs)
        self._shapes: dict[tuple[int, int, int], tuple[Any, ...]] = {}
        # engine truth by session (KV events' BlockStored.session_id), and the engine session id of a
        # conversation (the live proxy's session_tags book; None: the engine knows it by no id)
        self.sessions = SessionResidency()
        self.engine_session_of: Callable[[tuple[str, str]], str | None] = lambda key: None

    # --- feeding ----------------------------------------------------------------------------
    def on_forward(self, view: RequestView, now: float, anchor_blocks: int | None = None) -> int:
        """Record a forwarded prompt; returns the tokens of its prefix that were resident before.
        ``anchor_blocks`` (default: the view's) makes sure the anchor's last block is tracked."""
        if anchor_blocks is None:
            anchor_blocks = view.anchor_blocks
        self._forwards += 1
        self.last_forward_at = now
        self.rates.update(now, self._inserted, self._forwards, self._zone_hits)
        if self.stride == 0 and view.block_tokens:
            self.stride = max(1, self.stride_tokens // max(1, max(view.block_tokens)))
        hashes, seg = self._sample(view.block_hashes, view.block_tokens, anchor_blocks - 1)
        blocks = self._stamp
        # residency along a chain is monotone: binary-search the last resident tracked block
        lo, hi = 0, len(hashes)
        while lo < hi:
            mid = (lo + hi) // 2
            if hashes[mid] in blocks:
                lo = mid + 1
            else:
                hi = mid
        hit = sum(seg[:lo])
        if lo < len(hashes) and self.stride > 1:
            self._absorb(view.block_hashes, hashes, hashes[lo - 1] if lo else None)
        self._zone_hits += self._touch_sampled(hashes, seg)
        return hit

    def _absorb(self, full: Sequence[int], sampled: Sequence[int], last_resident: int | None) -> None:
        """Drop the tracked entries lying between this prompt's new tracked blocks: an earlier,
        shorter prompt's tail in the same chain, whose tokens the new entries' segments now count.
        Without this a session's every turn would leave its tail charged twice until it aged out
        (the shadow would then evict early). C-level set operations: no Python loop per block."""
        start = full.index(last_resident) + 1 if last_resident is not None else 0
        stale = self._stamp.keys() & set(full[start:])
        if not stale:
            return
        stale.difference_update(sampled)
        if not stale:
            return
        stamps, toks = self._stamp, self._tok
        qs = self._qs
        cs = qs[self._cur] if self._cur < len(qs) else self._seq + 1
        for h in stale:
            st = stamps.pop(h)
            t = toks.pop(h)
            self._used -= t
            if st < cs:
                self._zone_tok -= t

    def lifetime_s(self, now: float | None = None) -> float | None:
        """How long a block just made most recent survives untouched: capacity over the client
        insert rate as of ``now`` (None while either is unknown). A warm whose demand is further
        away than this is evicted again before it pays."""
        rate = self.insert_rate_at(now)
        if not self.capacity_tokens or not rate or rate <= 0:
            return None
        return self.capacity_tokens / rate

    def insert_rate_at(self, now: float | None) -> float | None:
        """The client insert rate as of ``now``: a silence since the last forward lowers it."""
        return self.rates.insert_rate_at(now, self._inserted)

    def touch(self, hashes: Sequence[int], tokens: Sequence[int], anchor_blocks: int = 0) -> None:
        """Mark a whole prompt (or an executed action's blocks) most recently used."""
        sh, seg = self._sample(hashes, tokens, anchor_blocks - 1)
        self._touch_sampled(sh, seg)

    def _sample(
        self, hashes: Sequence[int], tokens: Sequence[int], extra: int = -1
    ) -> tuple[Sequence[int], Sequence[int]]:
        """(tracked hashes, tokens of the segment each closes), in prefix order.

        The tracked positions depend only on (length, anchor's last block, stride), and with
        uniform blocks so do the segment sizes: both are memoised per shape (a handful of shapes
        per workload), so a request pays one C-level count and one C-level gather, not a Python
        loop over its blocks."""
        k = self.stride
        n = len(hashes)
        if k <= 1 or n == 0:
            return hashes, tokens
        if not 0 <= extra < n or extra % k == k - 1:
            extra = -1
        shape = self._shapes.get((n, extra, k))
        if shape is None:
            pos = list(range(k - 1, n, k))
            if extra >= 0:
                pos.append(extra)
            if (n - 1) % k != k - 1 and n - 1 != extra:
                pos.append(n - 1)
            pos.sort()
            if len(self._shapes) > _SHAPE_CACHE:
                self._shapes.clear()
            get = itemgetter(*pos) if len(pos) > 1 else (lambda seq, _i=pos[0]: (seq[_i],)) if pos else None
            shape = self._shapes[(n, extra, k)] = (pos, get, {})
        pos, get, segs = shape
        if get is None:
            return (), ()
        if n >= 2:
            t = tokens[1]
            t0 = tokens[0]
            if tokens.count(t) - (t0 == t) == n - 1:
                # uniform blocks after the first (the common case): segment sizes are per shape
                seg = segs.get((t0, t))
                if seg is None:
                    seg = []
                    prev = -1
                    for i in pos:
                        seg.append((i - prev) * t)
                        prev = i
                    seg[0] += t0 - t
                    if len(segs) > 64:
                        segs.clear()
                    seg = segs[(t0, t)] = tuple(seg)
                return get(hashes), seg
        cum = list(accumulate(tokens))
        seg = []
        prev = 0
        for i in pos:
            c = cum[i]
            seg.append(c - prev)
            prev = c
        return get(hashes), seg

    def _touch_sampled(self, hashes: Sequence[int], tokens: Sequence[int]) -> int:
        """Touch tracked blocks deepest-first; returns the tokens that were hit in the tail zone."""
        stamps = self._stamp
        toks = self._tok
        qs, qh = self._qs, self._qh
        first = seq = self._seq
        cs = qs[self._cur] if self._cur < len(qs) else seq + 1  # zone = stamps below this
        added = left_zone = 0
        for h, t in zip(reversed(hashes), reversed(tokens)):
            seq += 1
            old = stamps.get(h)
            if old is None:
                toks[h] = t
                added += t
            elif old < cs:
                left_zone += toks[h]
            stamps[h] = seq
        qs.extend(range(first + 1, seq + 1))  # one stamp each, consecutive, in touch order
        qh.extend(reversed(hashes))
        self._seq = seq
        self._zone_tok -= left_zone
        self._used += added
        self._inserted += added
        self._evict()
        return left_zone

    def _evict(self) -> None:
        cap = self.capacity_tokens
        stamps, toks = self._stamp, self._tok
        qs, qh = self._qs, self._qh
        head, n = self._head, len(qs)
        limit = self.max_entries
        used = self._used
        zone_left = evicted = 0
        cur = self._cur
        while (len(stamps) > limit or (cap > 0 and used > cap)) and head < n:
            h = qh[head]
            st = qs[head]
            qh[head] = 0  # passed: never read again, and an evicted hash is freed at once
            head += 1
            if stamps.get(h) != st:
                continue  # stale: the block was touched again later
            del stamps[h]
            t = toks.pop(h)
            used -= t
            evicted += t
            if head <= cur:
                zone_left += t
        self.evicted_tokens += evicted
        self._zone_tok -= zone_left
        self._used = used
        self._head = head
        if self._cur < head:
            self._cur = head
            self._zone_tok = 0
        if head > _COMPACT_SLACK and (head > n // 2 or n - head > 4 * len(stamps) + _COMPACT_SLACK):
            self._compact()

    def _compact(self) -> None:
        """Drop the evicted prefix (and, when re-touches piled up, every stale entry)."""
        qs, qh = self._qs, self._qh
        head, cur = self._head, self._cur
        if len(qs) - head > 4 * len(self._stamp) + _COMPACT_SLACK:
            stamps = self._stamp
            cs = qs[cur] if cur < len(qs) else self._seq + 1
            # C-level filter (map/compress): a Python loop per entry here was a multi-ms request
            tail_s, tail_h = qs[head:], qh[head:]
            live = list(map(eq, map(stamps.get, tail_h), tail_s))
            self._qs = array("q", compress(tail_s, live))
            self._qh = list(compress(tail_h, live))
            self._cur = bisect_left(self._qs, cs)  # stamps are appended in increasing order
        else:
            self._qs = qs[head:]
            self._qh = qh[head:]
            self._cur = cur - head
        self._head = 0

    @property
    def inserted_tokens(self) -> int:
        return self._inserted

    @property
    def used_tokens(self) -> int:
        return self._used

    def __len__(self) -> int:
        return len(self._stamp)

    def __contains__(self, h: int) -> bool:
        return h in self._stamp

    # --- corrections from the engine ----------------------------------------------------------
    def on_engine_truth(
        self,
        *,
        capacity_tokens: int | None = None,
        capacity_blocks: int | None = None,
        block_tokens: int | None = None,
        usage_ratio: float | None = None,
        cleared: bool = False,
        stored: Iterable[int] = (),
        stored_tokens: int | None = None,
        removed: Iterable[int] = (),
    ) -> None:
        """Correct the shadow: capacity (tokens, or engine blocks × block size), a cache reset,
        or exact stored/removed block ids (only meaningful when they are the views' ids; with
        stride > 1 untracked ids are simply not found)."""
        if capacity_blocks is not None and block_tokens:
            capacity_tokens = int(capacity_blocks) * int(block_tokens)
        self.epoch += 1
        if capacity_tokens is not None and capacity_tokens >= 0:
            self.capacity_tokens = int(capacity_tokens)
        if usage_ratio is not None:
            self.usage_ratio = float(usage_ratio)
        if cleared:
            self._stamp.clear()
            self._tok.clear()
            self._qs, self._qh = array("q"), []
            self._head = self._cur = self._zone_tok = self._used = 0
        qs = self._qs
        cs = qs[self._cur] if self._cur < len(qs) else self._seq + 1
        for h in removed:
            st = self._stamp.pop(h, None)
            if st is not None:
                t = self._tok.pop(h)
                self._used -= t
                if st < cs:
                    self._zone_tok -= t
        stored = list(stored)
        if stored:
            per = int(stored_tokens if stored_tokens is not None else (block_tokens or 16))
            self._touch_sampled(stored, [per] * len(stored))  # prefix order: first ends most recent
        self._evict()
