"""`session-oracle`: the engine evicts the session whose next request is furthest away, its tail first.

A reference (issue 37 item 3), not a deployable policy: it reads the stream's future arrivals. It is
the bound for policies that rank whole sessions (SGLang's session cache driven by close decisions
ranks them too, with far less knowledge). A free block belongs to the session of the request that
freed it last (a prefix shared by several sessions counts for the latest one); blocks of a session
with no request left go first, then sessions by next arrival, furthest first; within a session the
oldest freed block first (a request frees its blocks deepest first: the tail goes first). Unhashed
and action blocks (group None) go before all. Added here for the SGLang session figures; if issue
37's branch ships its own `session-oracle`, that one replaces this (same name, same rule).
"""

from __future__ import annotations

import math
from bisect import bisect_right

from proxy.replay.policies import ScoredEvictionPolicy


class SessionOraclePolicy(ScoredEvictionPolicy):
    name = "session-oracle"

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.requests = requests
        times: dict[str, list[float]] = {}
        for r in requests:
            if r.session_id is not None:
                times.setdefault(r.session_id, []).append(r.t)
        self.times = {s: sorted(ts) for s, ts in times.items()}

    def _group_of(self, key):
        j = self._freeing_index()
        return None if j is None else self.requests[j].session_id

    def _score(self, group, last: float, now: float) -> float:
        ts = self.times.get(group)
        if not ts:
            return -math.inf
        k = bisect_right(ts, now)
        if k >= len(ts):
            return -math.inf  # never comes back: first
        return -(ts[k] - now)  # furthest next arrival: lowest score

    def on_request(self, i, req, now):
        self._ev.version += 1  # a session's next arrival moved on
