"""How fast the cache turns over, measured from the stream the residency shadow sees.

Why: whether an action pays depends on how long what it keeps will stay (capacity ÷ the rate the
client traffic inserts tokens), how often requests arrive (the queueing a warm can cause) and how
much of the cache's oldest zone is still being hit (the pollution of pushing more in). Rates are
EWMAs over windows of at least one second, so one burst does not swing them.
"""

from __future__ import annotations


class Turnover:
    __slots__ = ("_fw", "_ins", "_t", "_zh", "insert_rate", "request_rate", "tail_reuse")

    def __init__(self) -> None:
        self.insert_rate: float | None = None  # tokens inserted per second (client traffic)
        self.request_rate = 0.0  # forwards per second
        self.tail_reuse = 0.0  # tokens hit in the tail zone per inserted token
        self._t: float | None = None
        self._ins = self._zh = self._fw = 0

    def update(self, now: float, inserted: int, forwards: int, zone_hits: int) -> None:
        """Fold in the counters' growth since the last window (called once per forwarded prompt)."""
        if self._t is None:
            self._t, self._ins = now, inserted
            return
        dt = now - self._t
        if dt < 1.0:
            return
        ins = inserted - self._ins
        r = ins / dt
        self.insert_rate = r if self.insert_rate is None else 0.7 * self.insert_rate + 0.3 * r
        self.request_rate = 0.7 * self.request_rate + 0.3 * (forwards - self._fw) / dt
        if ins > 0:
            self.tail_reuse = 0.7 * self.tail_reuse + 0.3 * (zone_hits - self._zh) / ins
        self._t, self._ins, self._zh, self._fw = now, inserted, zone_hits, forwards
