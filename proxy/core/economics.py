"""Does an action pay? Expected prefill saved against prefill spent, in engine tokens.

Why: a warmup is paid for on the same engine as the traffic it helps. Recomputing an evicted
prefix now costs exactly the prefill it may save later, so a warm never reduces the engine's work;
it only moves work off a client's critical path, and only if the engine had nothing better to do
at the time. A touch of a resident prefix costs ~one token and keeps the whole prefix. So the
planner asks this module, per candidate, for the net expected value of the cheapest action that
would make the prefix resident at the predicted demand, and acts only when it is positive:

    saving  = tokens the demand would otherwise prefill × P(demand comes) × P(still resident then)
    cost    = tokens prefilled now × reload price × engine utilisation
            + queueing: client requests waiting now, and those arriving while it runs, wait for it
            + pollution: the hits the blocks it pushes out of the cache would have had

P(still resident) follows the shadow's turnover: an LRU block with ``d`` tokens of cache ahead of
the eviction point survives a gap of ``g`` seconds while ``insert_rate·g < d``; with Poisson-like
traffic the chance is modelled as ``exp(−insert_rate·g/d)`` (d = capacity for a block just made
most recent). Pollution: the shadow counts the tokens that were hit while in the oldest zone of the
cache (``tail_reuse`` = such hits per inserted token); pushing ``n`` tokens in moves the eviction
point ``n`` tokens and loses that share of the hits of the ``min(n, zone)`` tokens at the tail.

Rules that are not a weighing: a warm (prefill of missing tokens) only in slack — no client
request waiting in the engine — so no client prefill queues behind it, and a warm whose demand
time is unknown only when quiet (no client prefill running either: the cache is not turning over); with the running set
alone larger than the cache nothing is done (``overflowing``). ``reload_price`` is the engine-token
price of bringing one evicted token back: 1.0 = recompute; a host-memory tier sets its load price.
The slack lane (the engine runs a priority policy and every action goes at its lowest priority)
prices an action as above: its queue is still a reason to wait. Dropping the waiting-queue term
and acting while clients queue (a lowest-priority warm is never admitted ahead of a queued client
request) was measured on the replay grid and lost: once admitted, a warm's prefill chunks run
before later arrivals', and 11 cells ended > 1% worse than LRU against 7 with FCFS pricing
(docs/replay.md "Lanes on the grid"). What the lane still changes is upstream of this module: the
planner does not stand back for requests it does not see (``external``).
``external`` > 0 (the engine's own gauges show requests that are neither
this proxy's clients nor its actions): the traffic the proxy sees is not all there is, so the
engine is never ``quiet``.
Pure: frozen dataclasses in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

TOUCH = "touch"
WARM = "warm"
WAIT = "wait"  # a warm that may pay, but not now: clients queue, prefill or (for one that pays only then) decode
NOTHING = ""


@dataclass(frozen=True, slots=True)
class Market:
    """What the engine is like right now (one per plan() call)."""

    capacity_tokens: float = 0.0  # 0 = unknown: residency cannot be estimated (assume kept)
    insert_rate: float | None = None  # tokens/s the client traffic inserts (shadow EWMA)
    zone_tokens: float = 0.0  # the shadow's "near eviction" tail zone
    tail_reuse: float = 0.0  # hits in the tail zone per inserted token (shadow)
    prefill_tokens_per_s: float = 5000.0
    request_rate: float = 0.0  # client requests/s (arrivals that could queue behind a warm)
    waiting: int = 0  # client requests waiting in the engine now
    prefilling: int = 0  # client requests in prefill now (no first token yet)
    decoding: int = 0  # client requests generating now (past their first output)
    utilisation: float = 0.0  # share of recent time the engine spent prefilling (0..1)
    running_tokens: float = 0.0  # prompt tokens of the client requests in flight
    reload_price: float = 1.0  # engine tokens per token to bring an evicted token back
    idle_s: float | None = None  # seconds since the last client request arrived (None = never)
    touch_cost_tokens: float = 16.0  # a touch: one recomputed block + one decode row
    touch_hidden_tokens: float = 0.0  # measured: tokens a touch found missing after all (the
    # shadow is coarse at the tail) and prefilled: a small warm
    external: int = 0  # engine requests that are neither this proxy's clients nor its actions (scraped)

    @property
    def slack(self) -> bool:
        """No client request queued in the engine: a warm started now runs after the requests
        already there (an engine schedules running and earlier-waiting requests first) and can only
        delay later arrivals, which ``queueing`` prices."""
        return self.waiting <= 0

    @property
    def quiet(self) -> bool:
        """Slack, no client prefill running, and no arrival for twice the traffic's mean gap (a
        Poisson stream has such a pause e^-2 of the time): the traffic has stopped inserting into
        the cache. A warm whose demand time is unknown waits for this, or the traffic still arriving
        evicts it again (its deepest blocks first) before the demand."""
        if self.waiting > 0 or self.prefilling > 0 or self.external > 0:
            return False
        if self.idle_s is None or self.request_rate <= 0:
            return True
        return self.idle_s >= 2.0 / self.request_rate

    @property
    def overflowing(self) -> bool:
        """The running requests alone need more than the cache: anything warmed is evicted by them."""
        return self.capacity_tokens > 0 and self.running_tokens >= self.capacity_tokens


@dataclass(frozen=True, slots=True)
class Prospect:
    """One candidate prefix and its predicted demand."""

    tokens: float  # the whole prefix
    missing: float  # tokens not resident now (the shadow's verdict)
    near_eviction: bool  # resident, but in the tail zone
    probability: float  # P(the predicted request comes)
    gap_s: float | None  # seconds until it comes; None = unknown (about one cache lifetime)
    imminent: bool = False  # it follows a request still running: soon, though not when exactly


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: str  # TOUCH, WARM, WAIT (ask again in slack; with a cost: once the decodes are done) or NOTHING
    saving: float  # expected tokens saved
    cost: float  # expected tokens spent (prefill, queueing, pollution)
    kept: float | None = None  # P(made resident now, still resident at the demand) it priced with

    @property
    def net(self) -> float:
        return self.saving - self.cost


def survival(distance_tokens: float, gap_s: float | None, m: Market) -> float:
    """P(a block with ``distance_tokens`` of cache before eviction outlives ``gap_s``). With no
    measured turnover yet, a block just made most recent survives and one in the tail zone does
    not (the shadow's own definition of "near eviction")."""
    if m.capacity_tokens <= 0:
        return 1.0
    if not m.insert_rate or m.insert_rate <= 0:
        return 1.0 if distance_tokens >= m.capacity_tokens else 0.0
    if distance_tokens <= 0:
        return 0.0
    gap = gap_s if gap_s is not None else m.capacity_tokens / m.insert_rate
    return math.exp(-m.insert_rate * max(0.0, gap) / distance_tokens)


def pollution(tokens: float, m: Market) -> float:
    """Hit tokens lost by pushing ``tokens`` more into the cache (or out of its tail zone)."""
    if tokens <= 0 or m.tail_reuse <= 0:
        return 0.0
    share = min(1.0, tokens / m.zone_tokens) if m.zone_tokens > 0 else 1.0
    return tokens * m.tail_reuse * share


def queueing(tokens: float, m: Market) -> float:
    """Client time (in tokens of prefill) spent waiting behind ``tokens`` of warmup prefill: every
    request waiting now and every one generating now (the engine step that carries the prefill is
    that much longer for each: vLLM schedules running requests' decodes and new prefills in one
    step, `vllm/v1/core/sched/scheduler.py` `schedule()`), plus the ones arriving while it runs
    (rate·s of them, s/2 each). A generating request's delay is client-visible: a tool call's first
    delta leaves only once its name is decoded, and every answer ends later."""
    if tokens <= 0:
        return 0.0
    s = tokens / max(1e-9, m.prefill_tokens_per_s)
    return (m.waiting + m.decoding) * tokens + m.request_rate * s * tokens / 2.0


def assess(p: Prospect, m: Market) -> Verdict:
    """The best of touch / warm / nothing for one prospect."""
    if m.overflowing or p.probability <= 0 or p.tokens <= 0:
        return Verdict(NOTHING, 0.0, 0.0)
    cap = m.capacity_tokens
    kept = survival(cap, p.gap_s, m)  # made most recent now
    if p.missing <= 0:
        if not p.near_eviction:
            return Verdict(NOTHING, 0.0, 0.0)  # resident and safe: nothing to buy
        left = survival(m.zone_tokens / 2.0 if m.zone_tokens > 0 else cap / 8.0, p.gap_s, m)
        hidden = min(m.touch_hidden_tokens, p.tokens)  # re-made by the touch: saves like a warm
        saving = (p.tokens - hidden) * p.probability * max(0.0, kept - left) + hidden * p.probability * kept
        spent = m.touch_cost_tokens + hidden * m.reload_price
        cost = (
            m.touch_cost_tokens
            + hidden * m.reload_price * min(1.0, max(0.0, m.utilisation))
            + queueing(spent, m)
            + pollution(p.tokens, m)
        )
        return Verdict(TOUCH, saving, cost, kept)
    if not (m.slack if p.gap_s is not None or p.imminent else m.quiet):
        return Verdict(WAIT, 0.0, 0.0)  # never queue client prefill behind a warm
    resident = max(0.0, p.tokens - p.missing)
    saving = p.missing * p.probability * kept
    if p.near_eviction and resident > 0:
        saving += resident * p.probability * max(0.0, kept - survival(m.zone_tokens / 2.0, p.gap_s, m))
    spent = p.missing * m.reload_price
    cost = (
        spent * min(1.0, max(0.0, m.utilisation))
        + queueing(spent, m)
        + pollution(p.missing + (resident if p.near_eviction else 0.0), m)
    )
    if saving <= cost < saving + m.decoding * spent:
        # pays once the clients decoding now are done: ask again then (the figures say why)
        return Verdict(WAIT, saving, cost, kept)
    return Verdict(WARM, saving, cost, kept)


class RunningSet:
    """Distinct prompt tokens of the client requests in flight (``Market.running_tokens``): what
    the engine must hold at once. Requests of one agent share its anchor, so the sum of their prompt
    sizes would overstate it; each block counts once while any running request holds it."""

    __slots__ = ("_held", "tokens")

    def __init__(self) -> None:
        self._held: dict[int, list[int]] = {}  # block hash -> [holders, tokens]
        self.tokens = 0

    def add(self, hashes: Sequence[int], tokens: Sequence[int]) -> None:
        held = self._held
        for h, t in zip(hashes, tokens, strict=False):
            e = held.get(h)
            if e is None:
                held[h] = [1, t]
                self.tokens += t
            else:
                e[0] += 1

    def remove(self, hashes: Sequence[int]) -> None:
        held = self._held
        for h in hashes:
            e = held.get(h)
            if e is None:
                continue
            e[0] -= 1
            if e[0] <= 0:
                del held[h]
                self.tokens -= e[1]
