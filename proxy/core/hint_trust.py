"""Per-source calibration of runtime hints: the ``TrustBook`` admits each hint by its source's
standing and scores the checks the traffic settles (hints.py defines the hints, their kinds and
``HintConfig``; hint_checks.py files the checks).

Why apart from hints.py: the vocabulary of hints is stable API; how much a source is believed is
a model that changes on its own (Beta posteriors per source and class, bounded in bytes).
"""

from __future__ import annotations

from collections.abc import Callable

from .hint_tables import ByteLRU
from .hints import (
    ACCEPTED,
    DIRECTIVE,
    FACT,
    IGNORED_STANDING,
    IGNORED_UNCHECKED,
    PREDICTION,
    REFUSED,
    SESSION_ENDED,
    Check,
    HintConfig,
    SourceRecord,
    hint_class,
)

# A source's charge: the record, its two-per-kind tallies at most (8 kinds) and its id; measured
# with tracemalloc in tests/core/test_hint_tables.py.
SOURCE_BYTES = 2048


class TrustBook:
    """Per-source calibration records; admits hints and scores their checks. The records live in a
    byte-bounded table (``sources_max_bytes``) that forgets the least valuable first
    (``SourceRecord.value``); ``on_forget`` (the CheckBook) drops a forgotten source's checks."""

    def __init__(self, cfg: HintConfig | None = None) -> None:
        self.cfg = cfg or HintConfig()
        self.sources: ByteLRU[str, SourceRecord] = ByteLRU(
            self.cfg.sources_max_bytes, value=SourceRecord.value, on_evict=self._forgotten
        )
        self.pending = 0  # checks open over all sources (set by the CheckBook; recounted on sweeps)
        self.outcomes: dict[tuple[str, str], int] = {}  # (kind, outcome) -> count
        self.on_forget: Callable[[str], None] | None = None

    def _forgotten(self, sid: str, rec: SourceRecord) -> None:
        if self.on_forget is not None:
            self.on_forget(sid)

    def record(self, sid: str, now: float) -> SourceRecord:
        rec = self.sources.get(sid)
        cfg = self.cfg
        if rec is None:
            rec = SourceRecord(sid, cfg.prior_alpha, cfg.prior_beta, cfg.prior_alpha, cfg.prior_beta)
            self.sources.put(sid, rec, SOURCE_BYTES + 2 * len(sid))
            while len(self.sources) > cfg.max_sources and self.sources.evict_one(protect=sid):
                pass
        else:
            self.sources.touch(sid)
        rec.last_seen = now
        return rec

    def admit(self, sid: str, kind: str, now: float, claimed_p: float = 1.0) -> str:
        """May a hint of ``kind`` from ``sid`` drive actions now? Counts it either way."""
        rec = self.record(sid, now)
        tally = rec.tally(kind)
        tally.hints += 1
        cls = hint_class(kind)
        cfg = self.cfg
        if cls == DIRECTIVE:
            outcome = ACCEPTED if sid in cfg.directive_sources else REFUSED
        elif rec.unchecked >= cfg.max_unchecked and kind != SESSION_ENDED:
            outcome = IGNORED_UNCHECKED
        elif cls == PREDICTION:
            ok = rec.standing(PREDICTION) * claimed_p >= cfg.prediction_min_p
            outcome = ACCEPTED if ok else IGNORED_STANDING
        else:
            floor = cfg.release_min_standing if kind == SESSION_ENDED else cfg.fact_min_standing
            outcome = ACCEPTED if rec.standing(FACT) >= floor else IGNORED_STANDING
        if outcome == ACCEPTED:
            tally.acted += 1
        elif outcome == REFUSED:
            tally.refused += 1
        else:
            tally.ignored += 1
        key = (kind, outcome)
        self.outcomes[key] = self.outcomes.get(key, 0) + 1
        return outcome

    def demote(self, sid: str, kind: str, was: str, now_is: str) -> None:
        """Re-count an admission (the driver could not open the hint's check: it drives nothing)."""
        rec = self.sources.get(sid)
        if rec is not None and was == ACCEPTED:
            t = rec.tally(kind)
            t.acted -= 1
            t.ignored += 1
        for key, d in (((kind, was), -1), ((kind, now_is), 1)):
            self.outcomes[key] = self.outcomes.get(key, 0) + d

    def weight(self, sid: str, cls: str) -> float:
        rec = self.sources.get(sid)
        if rec is None:
            return self.cfg.prior_alpha / (self.cfg.prior_alpha + self.cfg.prior_beta)
        return rec.standing(cls)

    def open_check(
        self,
        sid: str,
        kind: str,
        cls: str,
        now: float,
        deadline: float,
        tokens: int = 0,
        expected_at: float | None = None,
        exposed: bool = True,
    ) -> Check | None:
        """A check of a hint of ``sid`` (None when the source is not known). ``exposed``: the hint
        drives protective actions until checked, so it counts against the source's
        ``max_unchecked`` (a session_ended, which only stops actions, and the duration half of a
        tool_started do not). The CheckBook bounds and files it, and calls ``release`` when it goes."""
        rec = self.sources.get(sid)
        if rec is None:
            return None
        if exposed:
            rec.unchecked += 1
        rec.checks += 1
        return Check(sid, kind, cls, now, deadline, tokens, expected_at, exposed)

    def release(self, check: Check) -> None:
        """A check left the book (settled, expired or dropped): its source's counters go down."""
        rec = self.sources.get(check.source)
        if rec is None:
            return  # source forgotten meanwhile (its checks were dropped with it)
        if check.exposed:
            rec.unchecked = max(0, rec.unchecked - 1)
        rec.checks = max(0, rec.checks - 1)

    def close(self, check: Check, score: float, now: float, lead: float | None = None) -> None:
        """A check's outcome: ``score`` 1 = it came true, 0 = it did not (partial in between)."""
        rec = self.sources.get(check.source)
        if rec is None:
            return  # source forgotten meanwhile
        x = min(1.0, max(0.0, float(score)))
        g = self.cfg.forget
        if check.cls == PREDICTION:
            rec.pred_a = g * rec.pred_a + x
            rec.pred_b = g * rec.pred_b + (1.0 - x)
        else:
            rec.fact_a = g * rec.fact_a + x
            rec.fact_b = g * rec.fact_b + (1.0 - x)
        t = rec.tally(check.kind)
        t.checked += 1
        t.score += x
        t.tokens += check.tokens
        t.tokens_confirmed += x * check.tokens
        if lead is not None and x > 0:
            w = max(1, check.tokens) * x
            t.lead_weighted += lead * w
            t.lead_weight += w

    def duration_score(self, check: Check, arrived: float) -> float:
        """1 when the arrival is within tolerance of the predicted time, falling to 0 at 3x off."""
        if check.expected_at is None:
            return 1.0
        expected = check.expected_at - check.issued
        actual = arrived - check.issued
        tol = max(0.5, self.cfg.duration_tolerance * max(expected, 0.0))
        err = abs(actual - expected)
        if err <= tol:
            return 1.0
        return max(0.0, 1.0 - (err - tol) / (2.0 * tol))

    def report(self) -> dict[str, dict[str, object]]:
        """Per source: standings, unchecked hints, and per-kind tallies (ids are hashes, safe to show)."""
        out: dict[str, dict[str, object]] = {}
        for sid, rec in self.sources.items():
            out[sid] = {
                "fact_standing": round(rec.standing(FACT), 4),
                "prediction_standing": round(rec.standing(PREDICTION), 4),
                "unchecked": rec.unchecked,
                "directives": sid in self.cfg.directive_sources,
                "kinds": {k: t.as_dict() for k, t in sorted(rec.kinds.items())},
            }
        return out
