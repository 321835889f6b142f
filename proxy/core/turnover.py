"""How fast the cache turns over, measured from the stream the residency shadow sees.

Why: whether an action pays depends on how long what it keeps will stay (capacity ÷ the rate the
client traffic inserts tokens), how often requests arrive (the queueing a warm can cause) and how
much of the cache's oldest zone is still being hit (the pollution of pushing more in). Rates are
EWMAs over windows of at least one second, so one burst does not swing them. The insert rate weighs a
window by its length (a second of evidence weighs ``WEIGHT_PER_S``) and is read as of now
(``insert_rate_at``), so a pause lowers it while it lasts: what is kept during a tool pause is not
judged by the turnover of the burst before it.
"""

from __future__ import annotations

WEIGHT_PER_S = 0.3  # EWMA weight of one second of new evidence (a window of dt seconds: 1 - 0.7**dt)


def _weight(dt: float) -> float:
    return 1.0 - float((1.0 - WEIGHT_PER_S) ** dt)


class Turnover:
    __slots__ = ("_fw", "_ins", "_t", "_zh", "insert_rate", "request_rate", "tail_reuse")

    def __init__(self) -> None:
        self.insert_rate: float | None = None  # tokens inserted per second (client traffic)
        self.request_rate = 0.0  # forwards per second
        self.tail_reuse = 0.0  # tokens hit in the tail zone per inserted token
        self._t: float | None = None
        self._ins = self._zh = self._fw = 0

    def update(self, now: float, inserted: int, forwards: int, zone_hits: int) -> None:
        """Fold in the counters' growth since the last window (called once per forwarded prompt).
        A window's weight grows with its length, so a long silence counts as the evidence it is."""
        if self._t is None:
            self._t, self._ins = now, inserted
            return
        dt = now - self._t
        if dt < 1.0:
            return
        ins = inserted - self._ins
        w = _weight(dt)
        r = ins / dt
        self.insert_rate = r if self.insert_rate is None else (1.0 - w) * self.insert_rate + w * r
        # per window, not per second: `quiet` compares a pause with the traffic's gaps, not with itself
        self.request_rate = 0.7 * self.request_rate + 0.3 * (forwards - self._fw) / dt
        if ins > 0:
            self.tail_reuse = 0.7 * self.tail_reuse + 0.3 * (zone_hits - self._zh) / ins
        self._t, self._ins, self._zh, self._fw = now, inserted, zone_hits, forwards

    def insert_rate_at(self, now: float | None, inserted: int) -> float | None:
        """The insert rate as of ``now``, the open window folded in as ``update`` would fold it.

        Why: the rates move only when a prompt is forwarded, so during a pause (a tool running, the
        other agents done) they still say what the last burst inserted, and a block kept now would
        look doomed to the burst's turnover. ``inserted``: the shadow's counter now."""
        rate, t = self.insert_rate, self._t
        if now is None or rate is None or t is None or now - t < 1.0:
            return rate
        dt = now - t
        w = _weight(dt)
        return (1.0 - w) * rate + w * (inserted - self._ins) / dt
