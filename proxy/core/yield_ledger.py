"""Online yield per signal: what each kind of action (transition, tool_resume, fanout, hint) really
saved on this traffic against what it really cost, from the engine's own token counts.

Why: a signal can convert perfectly and still lose money. Conversion says the predicted request
hit the prefix an action touched; yield asks whether that hit was bought cheaper than it would
otherwise have been paid. Both sides come from engine-reported usage, never from estimates:

- **spent**: an executed action's own response usage, ``prompt_tokens - cached_tokens`` — the
  tokens the engine prefilled for it (a touch of a resident prefix costs ~1 token, a warm of an
  evicted one its whole missing part) — charged in full when the action ran alongside client
  traffic (client requests in flight or arriving while it ran: its prefill then delays theirs),
  and at ``idle_cost_share`` when the engine had nothing else to do. Why the weighting: in plain
  tokens a warm can never win — the request it prepares would have prefilled exactly what the warm
  prefilled; what a warm buys is moving that prefill off the critical path into idle time. The
  ledger therefore counts critical-path tokens: saved ones are always on it (a client waited for
  them), spent ones only when traffic was there to be delayed. The idle share keeps a price on
  idle warmups (energy, and the risk that a request arrives mid-warmup).
- **saved**: the first later client request whose chain contains the acted prefix contributes
  ``min(cached_tokens, acted tokens) - counterfactual``, where the counterfactual is what that
  request would have found cached had the action not run: the part that was already cached when
  the action ran (the action's own ``cached_tokens``), unless the residency shadow says it would
  have been evicted meanwhile (more tokens inserted since the action than its remaining life in
  the LRU at that time). See :func:`counterfactual_cached`.

Pollution (blocks an action pushed out that a later request then missed) is not charged per
action here; the switchback experiment (``core/switchback_experiment.py``) measures the total effect on TTFT,
pollution included.

Both sums decay exponentially (``half_life_s``) so the ledger follows the traffic. A signal whose
decayed yield is negative once at least ``min_evidence_tokens`` were spent is *throttled*: the
planner's gate hook lets one action of it through per ``explore_interval_s`` (the exploration
floor, so a signal whose traffic changed can earn its way back), and drops the rest. Retain hints
cost the engine nothing and are never throttled.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

RETAIN_KIND = "retain"


@dataclass(frozen=True, slots=True)
class YieldConfig:
    enabled: bool = True  # False: account, but never throttle
    half_life_s: float = 300.0  # saved/spent sums halve after this many seconds
    min_evidence_tokens: float = 2000.0  # no verdict before this many (decayed) tokens were spent
    explore_interval_s: float = 30.0  # a throttled signal still acts once per this many seconds
    idle_cost_share: float = 0.25  # share of an action's tokens charged when no client traffic ran


@dataclass(frozen=True, slots=True)
class SignalYield:
    reason: str
    saved_tokens: float  # decayed
    spent_tokens: float  # decayed
    yield_tokens: float  # saved - spent (decayed)
    throttled: bool
    actions: int  # lifetime counts (not decayed)
    conversions: int
    held_back: int  # actions the throttle dropped


def counterfactual_cached(
    pre_cached: int, remaining_life_tokens: float | None, inserted_at_action: int, inserted_now: int
) -> int:
    """Tokens the converting request would have found cached without the action.

    ``pre_cached``: the action's own ``cached_tokens`` (already resident when it ran).
    ``remaining_life_tokens``: how many more inserted tokens that resident part would have survived
    untouched, from the shadow at action time (None = unknown capacity: assume it stays)."""
    if pre_cached <= 0:
        return 0
    if remaining_life_tokens is not None and inserted_now - inserted_at_action > remaining_life_tokens:
        return 0
    return pre_cached


def remaining_life(capacity_tokens: int, zone_tokens: float, near_eviction: bool) -> float | None:
    """The shadow's estimate of how many inserted tokens a resident prefix survives untouched: in
    the tail zone (near eviction) half the zone on average, else the rest of the cache beyond the
    zone plus half the zone. None when the capacity is unknown."""
    if capacity_tokens <= 0:
        return None
    if near_eviction:
        return zone_tokens / 2
    return max(0.0, capacity_tokens - zone_tokens) + zone_tokens / 2


class _Signal:
    __slots__ = ("actions", "at", "conversions", "explored", "held_back", "saved", "spent")

    def __init__(self) -> None:
        self.saved = 0.0
        self.spent = 0.0
        self.at: float | None = None
        self.actions = 0
        self.conversions = 0
        self.held_back = 0
        self.explored = float("-inf")


class YieldLedger:
    """Decaying saved/spent sums per signal, and the throttle the planner's gate hook asks."""

    def __init__(self, config: YieldConfig = YieldConfig(), reasons: Iterable[str] = ()) -> None:
        self.config = config
        self._signals: dict[str, _Signal] = {r: _Signal() for r in reasons}

    def _decayed(self, reason: str, now: float) -> _Signal:
        s = self._signals.get(reason)
        if s is None:
            s = self._signals[reason] = _Signal()
        if s.at is not None and now > s.at:
            f = 0.5 ** ((now - s.at) / self.config.half_life_s) if self.config.half_life_s > 0 else 1.0
            s.saved *= f
            s.spent *= f
        if s.at is None or now > s.at:
            s.at = now
        return s

    # --- inputs -----------------------------------------------------------------------------------
    def record_spent(self, reason: str, tokens: float, contended: bool, now: float) -> None:
        """An executed action: the tokens the engine prefilled for it, and whether client traffic
        ran alongside (then they delayed it and count in full)."""
        s = self._decayed(reason, now)
        share = 1.0 if contended else self.config.idle_cost_share
        s.spent += max(0.0, float(tokens)) * share
        s.actions += 1

    def record_saved(self, reason: str, tokens: float, now: float) -> None:
        """A client request the action prepared: tokens it did not prefill thanks to the action."""
        s = self._decayed(reason, now)
        s.saved += max(0.0, float(tokens))
        s.conversions += 1

    # --- the throttle -----------------------------------------------------------------------------
    def throttled(self, reason: str, now: float) -> bool:
        s = self._signals.get(reason)
        if s is None or not self.config.enabled:
            return False
        s = self._decayed(reason, now)
        return s.spent >= self.config.min_evidence_tokens and s.saved < s.spent

    def allow(self, reason: str, kind: str, now: float) -> bool:
        """May an action of this signal be emitted now? (Called once per action about to be emitted.)"""
        if kind == RETAIN_KIND or not self.throttled(reason, now):
            return True
        s = self._signals[reason]
        if now - s.explored >= self.config.explore_interval_s:
            s.explored = now
            return True
        s.held_back += 1
        return False

    # --- outputs ----------------------------------------------------------------------------------
    def snapshot(self, now: float) -> dict[str, SignalYield]:
        out: dict[str, SignalYield] = {}
        for reason in list(self._signals):
            thr = self.throttled(reason, now)
            s = self._decayed(reason, now)
            out[reason] = SignalYield(
                reason, s.saved, s.spent, s.saved - s.spent, thr, s.actions, s.conversions, s.held_back
            )
        return out
