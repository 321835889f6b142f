"""Session references in the engine-mode replay: `session-oracle` and its blind variants.

Why: Belady bounds any eviction order but needs every block's next use, which no proxy can know.
What a proxy *can* hope to know is which paused session comes back soon (the stop reason, the tool
call, the session's learned pauses, a subagent fan-out). These references measure what that choice
is worth on the same engine as every other policy: the engine pool's free queue is replaced by a
`SessionEvictor` (as pinned Belady's is by `NextUseEvictor`), which evicts the free blocks of the
session judged furthest from returning, deepest first (its tail first, so its prefix stays
hittable). A free block belongs to the session of the request that freed it (the pool calls
`freeing(req_id)` before pushing a request's blocks); blocks an action or no request freed, and
unhashed slots, go first.

- `session-oracle`: the session whose next request arrives furthest in the future (never: first),
  knowing that arrival exactly (measurement only);
- `session-oracle-blind`: knows WHICH sessions return, not WHEN: those that never return first,
  then the least recently active;
- `session-pauses`: knows what a proxy sees: the stop reason of the session's last response and the
  pauses learned so far per stop reason (response end -> the session's next arrival, causally); the
  predicted return is the median of the learned pauses longer than the time already away (none
  longer: taken as gone, first to go). `cache_only.py` has the same three at request granularity.

The session order is recomputed when a request arrives or a response ends (the keys change only
then, or with `now` for the blind variants), not per evicted block: ~40 sessions, ~10^6 evictions.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable
from typing import Any

from proxy.replay.cache_only import SESSION_POLICIES, _PauseBook
from proxy.replay.policies import ReplayPolicy

_NONE = "\x00none"  # the pseudo-session of blocks no client request freed (first to go)


class SessionEvictor:
    """The engine pool's free queue, by session: `order(now)` lists sessions, first to go first;
    within a session the deepest free block goes first."""

    def __init__(self, session_of: Callable[[Any], str | None], depth: dict[Hashable, int], order: Callable):
        self.session_of = session_of  # engine req id -> session (None: an action)
        self.depth = depth
        self.order_fn = order  # (sessions, now) -> sessions, first to go first
        self.where: dict[Hashable, tuple[str, int]] = {}  # free key -> (session, seq)
        self.heaps: dict[str, list[tuple[int, int, Hashable]]] = {}
        self._cur = _NONE
        self._seq = 0
        self._order: list[str] | None = None
        self._order_at = math.nan
        self.version = 0  # the policy bumps it when a session's key changes

    def __len__(self) -> int:
        return len(self.where)

    def freeing(self, req_id: Any) -> None:
        s = self.session_of(req_id)
        self._cur = _NONE if s is None else s

    def push(self, key: Hashable, now: float) -> None:
        s = self._cur if isinstance(key, int) and key >= 0 else _NONE
        self._seq += 1
        self.where[key] = (s, self._seq)
        heap = self.heaps.get(s)
        if heap is None:
            heap = self.heaps[s] = []
            self._order = None  # a session the cached order does not list
        heapq.heappush(heap, (-self.depth.get(key, 1 << 30), self._seq, key))

    def remove(self, key: Hashable) -> None:
        del self.where[key]

    def pop(self, now: float) -> Hashable:
        if self._order is None or self._order_at != now or self._order_ver != self.version:
            live = [s for s, h in self.heaps.items() if h and s != _NONE]
            self._order = [_NONE, *self.order_fn(live, now)]
            self._order_at = now
            self._order_ver = self.version
        where = self.where
        for s in self._order:
            heap = self.heaps.get(s)
            while heap:
                _, seq, key = heap[0]
                heapq.heappop(heap)
                w = where.get(key)
                if w is not None and w[1] == seq:
                    del where[key]
                    return key
        self._order = None
        if where:  # sessions that got blocks since the order was taken
            return self.pop(now)
        raise IndexError("no free block to evict")

    _order_ver = -1


class SessionRefPolicy(ReplayPolicy):
    """`session-oracle`, `session-oracle-blind` or `session-pauses` as the engine's eviction order."""

    def __init__(self, name: str = "session-oracle"):
        if name not in SESSION_POLICIES:
            raise ValueError(f"unknown session reference {name!r}; choose from {SESSION_POLICIES}")
        self.name = name

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.requests = requests
        n = len(requests)
        self.sess = [r.session_id if r.session_id is not None else f"#{i}" for i, r in enumerate(requests)]
        self.nxt = [math.inf] * n
        last: dict[str, int] = {}
        for i in range(n - 1, -1, -1):
            j = last.get(self.sess[i])
            self.nxt[i] = requests[j].t if j is not None else math.inf
            last[self.sess[i]] = i
        self.last: dict[str, int] = {}  # session -> its latest arrived request
        self.active: dict[str, float] = {}  # session -> its latest arrival or response end
        self.ends: dict[int, float] = {}  # request -> when its response ended
        self.pauses = _PauseBook()
        self.waiting: dict[str, int] = {}  # session -> its requests arrived, not yet admitted

    def evictor(self):
        d = self.driver
        depth: dict[Hashable, int] = {}
        for full in d.full:
            for k, h in enumerate(full):
                depth.setdefault(h, k)

        def session_of(req_id: Any) -> str | None:
            j = d.index_of(req_id)
            return None if j is None else self.sess[j]

        self._ev = SessionEvictor(session_of, depth, self._order)
        return self._ev

    def _key(self, s: str, now: float) -> float:
        """Larger = evicted sooner."""
        j = self.last.get(s)
        if j is None:
            return math.inf
        if self.waiting.get(s):  # a request of it arrived and waits for admission: it is back now
            return -math.inf
        if self.name == "session-oracle":
            return self.nxt[j]
        if self.name == "session-oracle-blind":
            return math.inf if self.nxt[j] == math.inf else now - self.active.get(s, now)
        end = self.ends.get(j)
        if end is None:  # its response is still running: it is back now
            return now
        rem = self.pauses.remaining(self.requests[j].finish_reason or "", max(0.0, now - end))
        return now + (rem if rem is not None else 0.0)

    def _order(self, sessions: list[str], now: float) -> list[str]:
        return sorted(sessions, key=lambda s: (-self._key(s, now), self.active.get(s, 0.0)))

    def on_request(self, i, req, now):
        s = self.sess[i]
        prev = self.last.get(s)
        if prev is not None and prev in self.ends:
            self.pauses.add(self.requests[prev].finish_reason or "", now - self.ends.pop(prev))
        self.last[s] = i
        self.active[s] = now
        self.waiting[s] = self.waiting.get(s, 0) + 1
        self._bump()

    def on_admit(self, i, req, hit_blocks, now):
        s = self.sess[i]
        self.waiting[s] = max(0, self.waiting.get(s, 0) - 1)
        self._bump()

    def on_response(self, i, req, hit_blocks, now):
        self.ends[i] = now
        self.active[self.sess[i]] = now
        self._bump()

    def _bump(self) -> None:
        ev = getattr(self, "_ev", None)
        if ev is not None:
            ev.version += 1
