"""`oracle-keeper`: what a proxy that knew the future could buy on a stock LRU engine.

Why: Belady bounds eviction orders, not proxies. A proxy in front of a stock engine can only send
requests: a touch (`max_tokens=1` on resident blocks, keeping them most recent) or a warm (the same
on evicted ones: the engine prefills them again). This policy knows every request's arrival time
and blocks (measurement only, like Belady) and uses only those two actions:

- just in time before each request arrives (its lead: the prefill time of its known prefix + a
  margin of `MARGIN_S`), it sends the request's *known* prefix (the leading blocks that requests
  already arrived have named: the agent's anchor and the session's context; never content the
  proxy could not have seen) as one `max_tokens=1` request; the engine computes what is missing
  (a re-warm) or just refreshes what is resident (a touch). Anchors and session contexts are both
  covered: the next request's known prefix is the anchor followed by its session's history;
- only in the engine's slack: when nothing waits in the engine's queue; otherwise it retries at
  later events until the request arrives;
- it skips a request whose known prefix is already resident when the lead starts and not in the
  oldest `ZONE` of the LRU order (a touch would buy nothing).

A warm recomputes what the request would have computed, so this moves work off the request's
critical path (TTFT) rather than saving it; a touch saves the recompute of blocks LRU would have
evicted. Policies that warm can exceed pinned Belady's hit count (a warm is a prefetch).
"""

from __future__ import annotations

import heapq
import math

from proxy.replay.policies import ReplayPolicy

MARGIN_S = 0.05  # on top of the prefix's prefill time: a few engine steps of queueing
ZONE = 0.25  # a resident prefix is touched when a block of it is in this oldest share of the LRU


class OracleKeeperPolicy(ReplayPolicy):
    name = "oracle-keeper"

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        d = self.driver
        self.requests = requests
        bs = d.bs
        first: dict[int, int] = {}  # block -> first request naming it
        self.hittable = []
        for j, (full, r) in enumerate(zip(d.full, requests)):
            self.hittable.append(full[: (max(1, r.prompt_tokens) - 1) // bs])
            for x in full:  # every full block the request computed: content the proxy has seen
                first.setdefault(x, j)
        self.first = first
        self.wakes: list[tuple[float, int]] = []
        for j, (h, r) in enumerate(zip(self.hittable, requests)):
            known = sum(1 for _ in _known(h, first, j))  # upper bound: every earlier-named block
            if known:
                lead = cost.chunk_s(0, known * bs) + MARGIN_S
                self.wakes.append((r.t - lead, j))
        heapq.heapify(self.wakes)
        self.pending: dict[int, None] = {}  # requests whose lead started, not yet served
        self.sent = 0
        self.skipped_resident = 0
        self.deferred = 0

    def next_wakeup(self) -> float:
        return self.wakes[0][0] if self.wakes else math.inf

    def wakeup(self, now: float) -> None:
        wakes = self.wakes
        while wakes and wakes[0][0] <= now:
            _, j = heapq.heappop(wakes)
            self.pending[j] = None
        self._act(now)

    def on_request(self, i, req, now):
        self.pending.pop(i, None)
        self._act(now)

    def on_response(self, i, req, hit_blocks, now):
        self._act(now)

    def _act(self, now: float) -> None:
        if not self.pending:
            return
        d = self.driver
        if d.waiting():  # no slack: the engine has a queue
            self.deferred += 1
            return
        pool = d.engine.pool
        reqs, first, bs = self.requests, self.first, d.bs
        order: dict | None = None
        for j in list(self.pending):
            del self.pending[j]
            if reqs[j].t <= now:
                continue
            known = 0
            for _ in _known(self.hittable[j], first, j, reqs, now):
                known += 1
            if not known:
                continue
            chain = self.hittable[j][:known]
            if pool.match_prefix(chain) == known:
                if order is None:
                    free = pool.eviction_order(now)
                    order = {h: k for k, h in enumerate(free[: max(1, int(ZONE * len(free)))])}
                if not any(h in order for h in chain):
                    self.skipped_resident += 1
                    continue
            if d.submit_action("warm", "oracle", chain, known * bs, now):
                self.sent += 1
                order = None

    def extra(self):
        return {"sent": self.sent, "skipped_resident": self.skipped_resident, "deferred": self.deferred}


def _known(hashes, first, j, reqs=None, now=None):
    """The leading blocks of request j's prefix that earlier requests named (that have arrived by
    `now`, when given): content a proxy would have seen."""
    for h in hashes:
        k = first.get(h, j)
        if k >= j or (reqs is not None and reqs[k].t > now):
            return
        yield h
