"""The oracle keeper without clairvoyant timing: how much of its gain needs to know WHEN.

Why: `oracle-keeper` (oracle.py) sends each request's known prefix just before the request
arrives, using its true arrival time. A proxy sees a session pause (its response ended) but not when
it resumes. These variants keep the oracle's actions and its slack rule, and replace the arrival
time by what a proxy can learn:

- `oracle-keeper-blind`: knows WHICH — that a session's next request comes, and the prefix it
  will reuse (the oracle's known prefix) — but not WHEN. When a session's response ends it
  schedules the warm at that end plus the 25th, 50th and 75th percentiles of the pauses seen so far
  of the same kind (after ``tool_calls`` / after any other finish), each minus the prefix's
  prefill time, as the oracle's lead. The pauses are learned causally, from the requests already
  arrived (until `MIN_SAMPLES` are seen it does nothing). A later wake re-sends the prefix only
  when part of it was evicted or sits in the oldest `ZONE` of the LRU since (oracle.py's rule).
- `gap-keeper`: knows neither: after every response it keeps that request's own prompt (its full
  blocks: what the proxy saw, and what the session's next request extends) at the same learned
  times, whether or not the session returns. No future at all: a policy a proxy could run.

The gap between `oracle-keeper` and `oracle-keeper-blind` is the part of the oracle's gain that
needs arrival times; between `oracle-keeper-blind` and `gap-keeper`, the part that needs to know
which sessions return.
"""

from __future__ import annotations

import bisect
import heapq
import math

from proxy.replay.oracle import MARGIN_S, ZONE, _known
from proxy.replay.policies import ReplayPolicy

QUANTILES = (0.25, 0.5, 0.75)  # wakes per pause, at these shares of the learned pause distribution
MIN_SAMPLES = 3  # pauses of a kind seen before its distribution is used
TOOL = "tool_calls"


class GapQuantiles:
    """Pauses seen so far (response end -> the session's next arrival), by kind, kept sorted."""

    def __init__(self) -> None:
        self.samples: dict[bool, list[float]] = {True: [], False: []}

    def add(self, tool: bool, gap: float) -> None:
        bisect.insort(self.samples[tool], max(0.0, gap))

    def quantiles(self, tool: bool) -> list[float]:
        xs = self.samples[tool]
        if len(xs) < MIN_SAMPLES:
            return []
        n = len(xs)
        return [xs[min(n - 1, int(q * n))] for q in QUANTILES]


class OracleKeeperBlindPolicy(ReplayPolicy):
    name = "oracle-keeper-blind"
    knows_which = True  # the future's WHICH (next request, its prefix); never its WHEN

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        d = self.driver
        self.requests = requests
        bs = d.bs
        first: dict[int, int] = {}
        self.hittable = []
        for j, (full, r) in enumerate(zip(d.full, requests)):
            self.hittable.append(full[: (max(1, r.prompt_tokens) - 1) // bs])
            for x in full:
                first.setdefault(x, j)
        self.first = first
        # the session's next request (measurement only: the WHICH an oracle knows)
        self.next_in_session: list[int | None] = [None] * len(requests)
        last: dict[str, int] = {}
        for j, r in enumerate(requests):
            if r.session_id is None:
                continue
            k = last.get(r.session_id)
            if k is not None:
                self.next_in_session[k] = j
            last[r.session_id] = j
        self.gaps = GapQuantiles()
        self.ended: dict[str, tuple[float, bool]] = {}  # session -> (its last response end, tool?)
        self.arrived = 0  # requests arrived so far (the stream is in time order)
        self.wakes: list[tuple[float, int, int]] = []  # (time, seq, target)
        self._seq = 0
        self.pending: dict[int, tuple[int, ...]] = {}  # target -> the chain to keep, while its wake is due
        self.target_of: dict[int, int] = {}  # target -> the request whose arrival ends it
        self.sent = 0
        self.skipped_resident = 0
        self.deferred = 0

    def next_wakeup(self) -> float:
        return self.wakes[0][0] if self.wakes else math.inf

    def wakeup(self, now: float) -> None:
        wakes = self.wakes
        while wakes and wakes[0][0] <= now:
            _, _, t = heapq.heappop(wakes)
            if self.target_of.get(t, -1) >= self.arrived:  # still paused
                self.pending[t] = ()
        self._act(now)

    def on_request(self, i, req, now):
        self.arrived = i + 1
        sid = req.session_id
        if sid is not None:
            e = self.ended.pop(sid, None)
            if e is not None:
                self.gaps.add(e[1], now - e[0])
        self.pending.pop(i, None)
        self._act(now)

    def on_response(self, i, req, hit_blocks, now):
        sid = req.session_id
        if sid is not None:
            tool = req.finish_reason == TOOL
            self.ended[sid] = (now, tool)
            self._schedule(i, tool, now)
        self._act(now)

    def _target(self, i: int) -> tuple[int, int] | None:
        """(target id, the request whose arrival ends it) after request i's response, or None."""
        j = self.next_in_session[i]
        return None if j is None else (j, j)

    def _chain(self, t: int, now: float) -> tuple[int, ...]:
        known = list(_known(self.hittable[t], self.first, t, self.requests, now))
        return tuple(known)

    def _schedule(self, i: int, tool: bool, now: float) -> None:
        tgt = self._target(i)
        if tgt is None:
            return
        t, ends = tgt
        qs = self.gaps.quantiles(tool)
        if not qs:
            return
        self.target_of[t] = ends
        chain_len = len(self.hittable[t]) if self.knows_which else len(self.driver.full[i])
        lead = self.driver.cost.chunk_s(0, chain_len * self.driver.bs) + MARGIN_S
        for g in qs:
            self._seq += 1
            heapq.heappush(self.wakes, (now + max(0.0, g - lead), self._seq, t))

    def _act(self, now: float) -> None:
        if not self.pending:
            return
        d = self.driver
        if d.waiting():
            self.deferred += 1
            return
        pool = d.engine.pool
        order: dict | None = None
        for t in list(self.pending):
            del self.pending[t]
            if self.target_of.get(t, -1) < self.arrived:
                continue
            chain = self._chain(t, now)
            if not chain:
                continue
            known = len(chain)
            if pool.match_prefix(chain) == known:
                if order is None:
                    free = pool.eviction_order(now)
                    order = {h: k for k, h in enumerate(free[: max(1, int(ZONE * len(free)))])}
                if not any(h in order for h in chain):
                    self.skipped_resident += 1
                    continue
            if d.submit_action("warm", "oracle", chain, known * d.bs, now):
                self.sent += 1
                order = None

    def extra(self):
        n = {k: len(v) for k, v in self.gaps.samples.items()}
        return {
            "sent": self.sent,
            "skipped_resident": self.skipped_resident,
            "deferred": self.deferred,
            "pauses_learned": {"tool": n[True], "other": n[False]},
        }


class GapKeeperPolicy(OracleKeeperBlindPolicy):
    """No future knowledge: after each response, that request's own prompt is kept at the learned
    pause quantiles until the session sends its next request (if ever)."""

    name = "gap-keeper"
    knows_which = False

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.chains: dict[int, tuple[int, ...]] = {}
        self.session_of = [r.session_id for r in requests]
        self.open: dict[str, int] = {}  # session -> its last target (ended by its next arrival)

    def on_request(self, i, req, now):
        sid = req.session_id
        if sid is not None:
            t = self.open.pop(sid, None)
            if t is not None:
                self.target_of[t] = -1  # resumed: the target is void
                self.chains.pop(t, None)
        super().on_request(i, req, now)

    def _target(self, i: int) -> tuple[int, int] | None:
        sid = self.session_of[i]
        if sid is None:
            return None
        self.open[sid] = i
        self.chains[i] = tuple(self.driver.full[i])
        return i, len(self.requests)  # open until the session resumes (on_request voids it)

    def _chain(self, t: int, now: float) -> tuple[int, ...]:
        return self.chains.get(t, ())


class ToolGapKeeperPolicy(GapKeeperPolicy):
    """`gap-keeper` for tool pauses only: what a proxy sees (``finish_reason: tool_calls`` says the
    session will send the tool's result) — no future, only the visible pause and its learned length."""

    name = "tool-gap-keeper"

    def _target(self, i: int) -> tuple[int, int] | None:
        if self.requests[i].finish_reason != TOOL:
            return None
        return super()._target(i)
