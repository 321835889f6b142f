"""Baseline replay policies: lru, history, ttl, belady (scout policies live in `scout.py`).

Every policy owns one simulated cache of the same capacity and answers, per request in time order,
"how many leading blocks hit?". Policies that act (ttl pins, scout touches/warms) report each
executed action to the run's recorder so conversion, lead time and yield can be measured.

- `lru`: stock vLLM: `BlockPool` in LRU mode, request granularity (`access`).
- `history`: category-level reuse statistics learned online ("KVCache Cache in the Wild", ATC'25):
  a block's group is (request category, position bucket); each group learns, from the request
  stream itself (re-accesses, resident or not), its reuse ratio and mean reuse interval; the victim
  is the block with the lowest log-odds of a pending reuse given its age, from the group's reuse
  ratio ρ and empirical reuse-interval survival S: ρ·S(age) / (ρ·S(age) + 1 − ρ).
- `ttl`: Continuum-style: a response that ends in a tool call pins its session's prompt for τ
  seconds (or until the session's next request), on a stock LRU pool.
- `belady`: MIN with bypass on the same capacity (offline, precomputed): the bound.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from proxy.cachemodel.block_pool import BlockPool
from proxy.cachemodel.cost_model import CostModel
from proxy.replay.belady import belady_hits
from proxy.replay.grouped_cache import GroupedCache
from proxy.replay.measure import RunRecorder
from proxy.replay.traces import ReplayRequest


class ReplayPolicy:
    """Base: one cache, one answer per request. `wants_responses` asks for response-end events."""

    name = "base"
    wants_responses = False
    pin_running = False  # running requests hold their blocks until their response (ReplaySettings)

    def setup(self, requests: Sequence[ReplayRequest], capacity_blocks: int, cost: CostModel, rec: RunRecorder) -> None:
        self.capacity = capacity_blocks
        self.cost = cost
        self.rec = rec

    def on_request(self, i: int, req: ReplayRequest, now: float) -> int:
        raise NotImplementedError

    def on_response(self, i: int, req: ReplayRequest, hit_blocks: int, now: float) -> None:
        return None

    def extra(self) -> dict:
        """Policy-specific numbers for the report."""
        return {}


def execute_on_pool(
    pool: BlockPool,
    rec: RunRecorder,
    cost: CostModel,
    now: float,
    kind: str,
    reason: str,
    hashes: Sequence[int],
    tokens: Sequence[int],
    priority: int = 0,
    honours_priority: bool = False,
) -> bool:
    """Run one touch/warm/retain against a simulated pool and record it. Returns False when the
    engine cannot honour it (retain on an LRU engine)."""
    before = pool.match_prefix(hashes)
    cached = sum(tokens[:before])
    if kind == "retain":
        if not honours_priority:
            rec.unsupported += 1
            return False
        if before:
            pool.access(hashes[:before], now, priority)
        rec.action(now, kind, reason, hashes, tokens, before, before, cached, 0, 0.0)
        return True
    pool.access(hashes, now, priority if honours_priority else 0)
    after = pool.match_prefix(hashes)
    warmed = sum(tokens[before:after])
    loaded = 0
    if rec.tier is not None:  # host tier: the evicted part is loaded, not prefilled
        n = rec.tier.on_action(hashes, before, after)
        loaded = sum(tokens[before : before + n])
    warmed -= loaded
    rec.action_load_s += cost.load_s(loaded)  # host link time, not engine compute (async load)
    # a fully cached touch still recomputes the last token and runs one decode row
    service = cost.chunk_s(cached + loaded, max(warmed, 1)) + cost.decode_seq_s
    rec.action(now, kind, reason, hashes, tokens, before, after, cached, warmed, service)
    return True


def admit(pool: BlockPool, key: int, hashes: Sequence[int], now: float) -> int:
    """A request that holds its blocks while it runs (``pin_running``): the prefix that fits beside
    the running requests is allocated and held until ``pool.free(key)``; the rest is not cached.
    Returns the prefix hit."""
    got = pool.allocate(key, hashes[: pool.admissible(hashes)], now)
    return got if got is not None else 0


class LruPolicy(ReplayPolicy):
    name = "lru"

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.pool = BlockPool(capacity_blocks, "lru")
        self.wants_responses = self.pin_running

    def on_request(self, i, req, now):
        if self.pin_running:
            return admit(self.pool, i, req.block_hashes, now)
        return self.pool.access(req.block_hashes, now)

    def on_response(self, i, req, hit_blocks, now):
        self.pool.free(i, now)


class BeladyPolicy(ReplayPolicy):
    name = "belady"

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.hits = belady_hits([r.block_hashes for r in requests], capacity_blocks)

    def on_request(self, i, req, now):
        return self.hits[i]


def position_bucket(j: int) -> int:
    """0, 1, 2-3, 4-7, ... : blocks deeper in a prompt share statistics more coarsely."""
    return j.bit_length()


class HistoryPolicy(ReplayPolicy):
    name = "history"

    BINS: ClassVar[list[float]] = [float(x) for x in np.logspace(-3, 5, 49)]  # reuse-interval edges (s), log spaced

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.accesses: dict = {}
        self.reuses: dict = {}
        self.hist: dict = {}  # group -> reuse-interval counts per bin
        self.seen: dict[int, float] = {}  # block -> last access (every block the stream named)
        self.cache = GroupedCache(capacity_blocks, self._score)
        self.wants_responses = self.pin_running
        self._cache_key = None
        self._memo: dict = {}

    def _score(self, group, last: float, now: float) -> float:
        """Log-odds that the block is re-accessed later, given it has waited `now - last`:
        ρ·S(age) / (ρ·S(age) + 1 − ρ), S = the group's empirical reuse-interval survival."""
        memo = self._memo.get(group)
        if memo is None:
            counts = self.hist.get(group)
            rho = (self.reuses.get(group, 0) + 1) / (self.accesses.get(group, 0) + 2)
            if counts is None:
                surv = [1.0] * (len(self.BINS) + 2)
            else:
                tail = np.cumsum(np.asarray(counts[::-1], dtype=float))[::-1]  # samples in bin k or above
                surv = (tail / max(tail[0], 1)).tolist() + [0.0]
            memo = self._memo[group] = (rho, surv)
        rho, surv = memo
        p = rho * surv[bisect_left(self.BINS, now - last)]
        return math.log(p + 1e-9) - math.log(p + 1.0 - rho + 1e-9)

    def on_request(self, i, req, now):
        hashes = req.block_hashes
        cat = req.category
        groups = [(cat, position_bucket(j)) for j in range(len(hashes))]
        hit = self.cache.match_prefix(hashes)
        acc, reuses, hist, seen = self.accesses, self.reuses, self.hist, self.seen
        bins = self.BINS
        for h, g in zip(hashes, groups):  # reuse = a re-access, resident or not (policy-independent)
            acc[g] = acc.get(g, 0) + 1
            last = seen.get(h)
            if last is not None:
                reuses[g] = reuses.get(g, 0) + 1
                c = hist.get(g)
                if c is None:
                    c = hist[g] = [0] * (len(bins) + 1)
                c[bisect_left(bins, now - last)] += 1
            seen[h] = now
        self._memo.clear()
        self.cache.access(hashes, groups, now)
        if self.pin_running:
            self.cache.hold(i, hashes)
        return hit

    def on_response(self, i, req, hit_blocks, now):
        self.cache.release(i)


class TtlPolicy(ReplayPolicy):
    """Pin a tool-calling session's prompt for τ seconds on an LRU pool (Continuum)."""

    name = "ttl"
    wants_responses = True

    def __init__(self, ttl_s: float = 10.0):
        self.ttl_s = ttl_s

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.pool = BlockPool(capacity_blocks, "lru")
        self.pins: dict[str, float] = {}  # session -> pin expiry
        self.pinned = 0
        self.pin_failed = 0

    def _expire(self, now: float) -> None:
        if not self.pins:
            return
        for sid, until in list(self.pins.items()):
            if until <= now:
                self.pool.free(("pin", sid), now)
                del self.pins[sid]

    def on_request(self, i, req, now):
        self._expire(now)
        sid = req.session_id
        if sid is not None and sid in self.pins:
            hit = self.pool.match_prefix(req.block_hashes)
            self.pool.free(("pin", sid), now)  # the resume arrived: unpin, then run it
            del self.pins[sid]
            self._run(i, req, now)
            return hit
        return self._run(i, req, now)

    def _run(self, i, req, now):
        if self.pin_running:
            return admit(self.pool, i, req.block_hashes, now)
        return self.pool.access(req.block_hashes, now)

    def on_response(self, i, req, hit_blocks, now):
        if self.pin_running:
            self.pool.free(i, now)
        self._expire(now)
        if req.finish_reason != "tool_calls" or req.session_id is None or req.session_id in self.pins:
            return
        hashes = req.block_hashes
        before = self.pool.match_prefix(hashes)
        if before == 0:
            return
        if self.pool.allocate(("pin", req.session_id), hashes[:before], now) is None:
            self.pin_failed += 1
            return
        self.pins[req.session_id] = now + self.ttl_s
        self.pinned += 1
        self.rec.action(
            now,
            "retain",
            "tool_resume",
            hashes,
            req.block_tokens,
            before,
            before,
            sum(req.block_tokens[:before]),
            0,
            0.0,
        )

    def extra(self):
        return {"pins": self.pinned, "pin_failed": self.pin_failed, "ttl_s": self.ttl_s}
