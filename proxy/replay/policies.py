"""Baseline replay policies: lru, history, ttl, belady (scout policies live in `scout.py`).

Every policy runs on the same `SimEngine` (`engine_run.py`) with the same capacity; a policy shapes
that engine only through its eviction order (`evictor()`), the actions it submits as engine
requests, and pool pins. Policies that act (ttl pins, scout touches/warms) report each executed
action to the run's recorder so conversion, lead time and yield can be measured.

- `lru`: stock vLLM: the engine's `BlockPool` in LRU mode.
- `history`: category-level reuse statistics learned online ("KVCache Cache in the Wild", ATC'25):
  a block's group is (request category, position bucket); each group learns, from the request
  stream itself (re-accesses, resident or not), its reuse ratio and reuse-interval survival; the
  engine's victim is the free block with the lowest log-odds of a pending reuse given its age:
  ρ·S(age) / (ρ·S(age) + 1 − ρ).
- `ttl`: Continuum-style: a response that ends in a tool call pins its session's prompt for τ
  seconds (or until the session's next request), as the engine pool's eviction order: LRU, pinned
  blocks last (a pin yields under pressure rather than stalling admission).
- `belady`: pinned Belady: the engine evicts, among the free blocks (no running request holds
  them), the one whose next use is farthest. The bound for any eviction order on that engine.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from proxy.cachemodel.cost_model import CostModel
from proxy.cachemodel.policy_pool import ScoredEvictor
from proxy.replay.belady import NextUseEvictor
from proxy.replay.measure import RunRecorder
from proxy.replay.traces import ReplayRequest

if TYPE_CHECKING:
    from proxy.replay.engine_run import EngineDriver


class ReplayPolicy:
    """Base: hooks the engine driver calls in virtual time. `driver` is set before `setup`."""

    name = "base"
    eviction = "lru"  # the engine's stock eviction mode when `evictor()` is None
    driver: EngineDriver

    def setup(self, requests: Sequence[ReplayRequest], capacity_blocks: int, cost: CostModel, rec: RunRecorder) -> None:
        self.capacity = capacity_blocks
        self.cost = cost
        self.rec = rec

    def evictor(self) -> Any:
        """The engine pool's eviction order (`policy_pool.Evictor`), or None for the stock one."""
        return None

    def engine_session(self, i: int, req: ReplayRequest, now: float) -> str | None:
        """The session id the request carries to the engine (SGLang's session cache; before
        `on_request`, before the engine queues it). None: no session."""
        return None

    def on_request(self, i: int, req: ReplayRequest, now: float) -> None:
        """A request arrives (before the engine sees it)."""

    def on_admit(self, i: int, req: ReplayRequest, hit_blocks: int, now: float) -> None:
        """The engine scheduled it: `hit_blocks` is its GPU prefix hit."""

    def on_response(self, i: int, req: ReplayRequest, hit_blocks: int, now: float) -> None:
        """Its last token was sampled at `now`."""

    def next_wakeup(self) -> float:
        """When the policy wants to be called (`wakeup`) without an event; inf = never."""
        return math.inf

    def wakeup(self, now: float) -> None:
        """Its timer is due: it must consume every wakeup at or before `now`."""

    def on_stall(self, now: float) -> bool:
        """The engine cannot admit anything and no event is left: release what the policy holds.
        Returns whether anything was released."""
        return False

    def on_end(self, now: float) -> None:
        """The stream is over and the engine idle."""

    def extra(self) -> dict:
        """Policy-specific numbers for the report."""
        return {}


class LruPolicy(ReplayPolicy):
    name = "lru"


class BeladyPolicy(ReplayPolicy):
    name = "belady"

    def evictor(self):
        d = self.driver
        # a use is a block the request could hit: the engine recomputes a prompt's last token, so
        # its hit stops at (prompt − 1) // block_size blocks
        hittable = [full[: (max(1, r.prompt_tokens) - 1) // d.bs] for full, r in zip(d.full, d.requests)]
        return NextUseEvictor(hittable, d.index_of)


def position_bucket(j: int) -> int:
    """0, 1, 2-3, 4-7, ... : blocks deeper in a prompt share statistics more coarsely."""
    return j.bit_length()


class ScoredEvictionPolicy(ReplayPolicy):
    """In-engine eviction by a score per group of freed blocks (`history`, `scout-engine`): the engine
    pool's `ScoredEvictor` asks the subclass's `_score(group, last, now)` and `_group_of(key)`."""

    def evictor(self):
        self._ev = ScoredEvictor(self._score, self._group_of)
        return self._ev

    def _freeing_index(self) -> int | None:
        """The stream index of the request whose blocks the engine is freeing (None: an action's)."""
        return self.driver.index_of(self._ev.freeing_req)

    def _group_of(self, key: Any) -> Any:
        raise NotImplementedError

    def _score(self, group: Any, last: float, now: float) -> float:
        raise NotImplementedError


class HistoryPolicy(ScoredEvictionPolicy):
    name = "history"

    BINS: ClassVar[list[float]] = [float(x) for x in np.logspace(-3, 5, 49)]  # reuse-interval edges (s), log spaced

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.requests = requests
        self.accesses: dict = {}
        self.reuses: dict = {}
        self.hist: dict = {}  # group -> reuse-interval counts per bin
        self.seen: dict[int, float] = {}  # block -> last access (every block the stream named)
        self._memo: dict = {}
        self._groups: dict = {}  # block -> group, for the request freeing its blocks

    def _group_of(self, key):
        j = self._freeing_index()
        if j is None:
            return None
        g = self._groups.get(j)
        if g is None:
            req = self.requests[j]
            g = self._groups[j] = {h: (req.category, position_bucket(d)) for d, h in enumerate(req.block_hashes)}
        return g.get(key)

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
        acc, reuses, hist, seen = self.accesses, self.reuses, self.hist, self.seen
        bins = self.BINS
        for j, h in enumerate(hashes):  # reuse = a re-access, resident or not (policy-independent)
            g = (cat, position_bucket(j))
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
        self._ev.version += 1  # the statistics behind the scores changed

    def on_response(self, i, req, hit_blocks, now):
        self._groups.pop(i, None)


class TtlEvictor:
    """LRU, except that blocks pinned by a session paused on a tool go only when no unpinned free
    block is left (a pin yields under pressure rather than stalling admission)."""

    def __init__(self) -> None:
        self.free: OrderedDict = OrderedDict()  # unpinned, head = next victim
        self.kept: OrderedDict = OrderedDict()  # pinned, head = oldest
        self.pinned: dict = {}  # block -> pins holding it

    def __len__(self) -> int:
        return len(self.free) + len(self.kept)

    def freeing(self, req_id) -> None:
        return None

    def push(self, key, now: float) -> None:
        (self.kept if key in self.pinned else self.free)[key] = None

    def remove(self, key) -> None:
        if self.free.pop(key, 0) is not None:
            del self.kept[key]

    def pop(self, now: float):
        if self.free:
            return self.free.popitem(last=False)[0]
        key = self.kept.popitem(last=False)[0]
        return key

    def pin(self, keys) -> None:
        for k in keys:
            self.pinned[k] = self.pinned.get(k, 0) + 1
            if k in self.free:
                del self.free[k]
                self.kept[k] = None

    def unpin(self, keys) -> None:
        for k in keys:
            c = self.pinned.get(k, 0) - 1
            if c > 0:
                self.pinned[k] = c
                continue
            self.pinned.pop(k, None)
            if k in self.kept:  # idle since the pin: back among the oldest
                del self.kept[k]
                self.free[k] = None
                self.free.move_to_end(k, last=False)


class TtlPolicy(ReplayPolicy):
    """Pin a tool-calling session's prompt for τ seconds (Continuum), as the engine pool's eviction
    order: pinned blocks are evicted only when no unpinned free block is left, until the pin
    expires or the session's next request arrives."""

    name = "ttl"

    def __init__(self, ttl_s: float = 10.0):
        self.ttl_s = ttl_s

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.pins: dict[str, tuple[float, list]] = {}  # session -> (pin expiry, pinned blocks)
        self.pinned = 0

    def evictor(self):
        self._ev = TtlEvictor()
        return self._ev

    def _unpin(self, sid: str) -> None:
        _, keys = self.pins.pop(sid)
        self._ev.unpin(keys)

    def _expire(self, now: float) -> None:
        if not self.pins:
            return
        for sid, (until, _) in list(self.pins.items()):
            if until <= now:
                self._unpin(sid)

    def next_wakeup(self) -> float:
        return min((u for u, _ in self.pins.values()), default=math.inf)

    def wakeup(self, now: float) -> None:
        self._expire(now)

    def on_request(self, i, req, now):
        self._expire(now)
        sid = req.session_id
        if sid is not None and sid in self.pins:
            self._unpin(sid)  # the resume arrived: unpin, then it runs

    def on_response(self, i, req, hit_blocks, now):
        self._expire(now)
        if req.finish_reason != "tool_calls" or req.session_id is None or req.session_id in self.pins:
            return
        pool = self.driver.engine.pool
        hashes = self.driver.full[i]
        before = pool.match_prefix(hashes)
        if before == 0:
            return
        keys = list(hashes[:before])
        self._ev.pin(keys)
        self.pins[req.session_id] = (now + self.ttl_s, keys)
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
        return {"pins": self.pinned, "ttl_s": self.ttl_s}
