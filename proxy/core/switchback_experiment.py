"""Switchback self-evaluation: does acting pay on *this* traffic? Alternate policy-on and
observe-only windows of the whole engine and compare their client-visible TTFT.

Why switchback and not per-request A/B: requests share one cache, so a warmup's pollution lands on
a held-back request too; alternating the whole engine over time measures the total effect,
pollution included (see /work/shared/design/self-evaluation.md and ``window_stats``).

The design, and why each part:
- **Randomised schedule**: windows of random length (uniform in [window_min_s, window_max_s]) in
  randomised blocks: each block holds one observe-only window at a random position among
  ``round(1/control_share)`` windows, so no fixed alternation can align with a periodic workload
  and every block has both arms.
- **Burn-in**: requests that start in the first part of a window are not counted — the cache
  remembers the previous arm. The burn-in is one cache turnover (capacity ÷ insert rate, from the
  residency shadow), at least ``burn_in_min_s`` and at most ``burn_in_max_share`` of the window.
- **Window as the unit**: a request counts for the window it started in; a window closes once the
  next window's burn-in is over (its slow requests have finished by then; later ones are dropped
  and counted). Windows with fewer than ``min_window_requests`` counted requests are discarded.
- **Fixed number of windows per decision**: the estimate is exported continuously, but the proxy
  *acts* on it only when a batch of ``decision_windows`` usable windows (and at least
  ``MIN_ARM_WINDOWS`` of each arm) is complete, looking at each batch once, so each decision is a
  plain fixed-sample test at ``confidence`` (no peeking
  problem). Then: confidently harmful (the interval's lower end above ``harm_margin`` × off TTFT)
  -> observe-only for ``retry_s``, then a fresh experiment; confidently helpful (the upper end
  below 0) -> the control share drops to ``control_share_confident`` (the experiment's own cost);
  otherwise the next batch starts.
- **Operator pins**: mode "on" acts always (no control windows), "off" never acts (observe-only),
  "auto" runs the experiment.

Pure: explicit ``now``, a seeded ``random.Random`` passed in, no I/O. ``tick`` returns events the
runtime logs and counts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TypedDict

from .window_stats import EffectEstimate, effect


class EffectDict(TypedDict):
    """An `EffectEstimate` as plain JSON (seconds; relative = share of the off-arm mean)."""

    effect: float
    low: float
    high: float
    se: float
    df: int
    relative: float
    relative_low: float
    relative_high: float
    on_mean: float
    off_mean: float
    adjusted_for: list[str]


class Estimate(TypedDict):
    """What ``Switchback.estimate`` reports for a batch of windows."""

    windows_on: int
    windows_off: int
    confidence: float
    hit_ratio_on: float | None
    hit_ratio_off: float | None
    request_rate_on: float | None
    request_rate_off: float | None
    uncached_tokens_per_request_on: float | None
    uncached_tokens_per_request_off: float | None
    ttft: EffectDict | None
    latency: EffectDict | None


class Decision(TypedDict):
    verdict: str  # "harmful" | "helpful" | "inconclusive"
    estimate: Estimate | None


MODES = ("auto", "on", "off")
MIN_ARM_WINDOWS = 3  # a decision needs this many usable windows of each arm


@dataclass(frozen=True, slots=True)
class SwitchbackConfig:
    mode: str = "auto"
    window_min_s: float = 30.0
    window_max_s: float = 120.0
    burn_in_min_s: float = 5.0
    burn_in_max_share: float = 0.5
    control_share: float = 0.5  # share of observe-only windows while the effect is unknown
    control_share_confident: float = 0.2  # ... once the last decision found it helpful
    decision_windows: int = 12  # usable windows per decision batch
    min_window_requests: int = 3
    confidence: float = 0.9
    harm_margin: float = 0.0  # relative TTFT increase tolerated before "harmful"
    retry_s: float = 1800.0  # observe-only this long after a harmful verdict
    start_after_s: float = 300.0  # policy on (no experiment) for this long after start


@dataclass(slots=True)
class Window:
    index: int
    on: bool
    start: float
    end: float
    burn_end: float
    n: int = 0
    ttft: float = 0.0
    latency: float = 0.0
    prompt: int = 0
    cached: int = 0
    late: int = 0

    def summary(self) -> dict[str, object]:
        span = max(1e-9, self.end - self.burn_end)
        return {
            "index": self.index,
            "arm": "on" if self.on else "off",
            "requests": self.n,
            "length_s": round(self.end - self.start, 3),
            "burn_in_s": round(self.burn_end - self.start, 3),
            "mean_ttft_s": round(self.ttft / self.n, 6) if self.n else None,
            "mean_latency_s": round(self.latency / self.n, 6) if self.n else None,
            "hit_ratio": round(self.cached / self.prompt, 4) if self.prompt else None,
            "prompt_tokens_per_request": round(self.prompt / self.n, 1) if self.n else None,
            "uncached_tokens": self.prompt - self.cached,
            "request_rate_per_s": round(self.n / span, 4),
        }


class Switchback:
    def __init__(self, config: SwitchbackConfig, rng: random.Random, now: float) -> None:
        if config.mode not in MODES:
            raise ValueError(f"switchback mode must be one of {MODES}, got {config.mode!r}")
        if not 0 < config.window_min_s <= config.window_max_s:
            raise ValueError("switchback windows need 0 < window_min_s <= window_max_s")
        self.config = config
        self.rng = rng
        self.started = now
        self.state = {"auto": "starting", "on": "pinned_on", "off": "pinned_off"}[config.mode]
        self.control_share = config.control_share
        self.current: Window | None = None
        self.previous: Window | None = None
        self.batch: list[Window] = []
        self.block: list[bool] = []
        self.retry_at: float | None = None
        self.last_decision: Decision | None = None
        self.windows = {"on": 0, "off": 0, "discarded": 0}
        self.decisions = {"harmful": 0, "helpful": 0, "inconclusive": 0}
        self.dropped = 0  # outcomes that arrived after their window closed
        self._next_index = 0

    # --- the question the planner's gate asks ---------------------------------------------------
    def active(self) -> bool:
        """Does the policy act now? (state after the last ``tick``)"""
        st = self.state
        if st == "experiment":
            return self.current is not None and self.current.on
        return st in ("pinned_on", "starting")

    # --- time -------------------------------------------------------------------------------------
    def tick(self, now: float, turnover_s: float | None = None) -> list[tuple[str, dict[str, object]]]:
        """Advance the schedule; returns events ("window", "decision", "observe_only", "resume")."""
        events: list[tuple[str, dict[str, object]]] = []
        cfg = self.config
        if self.state == "starting" and now - self.started >= cfg.start_after_s:
            self.state = "experiment"
            events.append(("resume", {"reason": "experiment starts"}))
        if self.state == "observe_only" and self.retry_at is not None and now >= self.retry_at:
            self.state, self.retry_at = "experiment", None
            self.control_share = cfg.control_share
            events.append(("resume", {"reason": "retry after observe-only"}))
        if self.state != "experiment":
            self.current = self.previous = None
            return events
        if self.current is None or now >= self.current.end:
            done, self.previous = self.previous, None
            self._close(done, now, events)
            if self.state == "experiment":
                self.previous = self.current
                self.current = self._open(now, turnover_s)  # the arm changes now: the window starts now
        if (
            self.state == "experiment"
            and self.previous is not None
            and self.current is not None
            and now >= min(self.current.burn_end, self.current.end)
        ):
            done, self.previous = self.previous, None
            self._close(done, now, events)
        if self.state != "experiment":
            self.current = self.previous = None
        return events

    def _open(self, now: float, turnover_s: float | None) -> Window:
        cfg = self.config
        if not self.block:
            size = max(2, round(1.0 / max(1e-6, self.control_share)))
            self.block = [True] * size
            self.block[self.rng.randrange(size)] = False
        on = self.block.pop(0)
        length = self.rng.uniform(cfg.window_min_s, cfg.window_max_s)
        burn = max(cfg.burn_in_min_s, turnover_s or 0.0)
        burn = min(burn, cfg.burn_in_max_share * length)
        w = Window(self._next_index, on, now, now + length, now + burn)
        self._next_index += 1
        return w

    def _close(self, w: Window | None, now: float, events: list[tuple[str, dict[str, object]]]) -> None:
        if w is None:
            return
        usable = w.n >= self.config.min_window_requests
        self.windows["on" if w.on else "off"] += usable
        self.windows["discarded"] += not usable
        events.append(("window", dict(w.summary(), usable=usable)))
        if not usable:
            return
        self.batch.append(w)
        n_on = sum(1 for b in self.batch if b.on)
        arms_ok = min(n_on, len(self.batch) - n_on) >= MIN_ARM_WINDOWS
        # the stopping rule depends on window counts only, never on the outcomes: a fixed-size test
        if len(self.batch) >= self.config.decision_windows and arms_ok:
            self._decide(now, events)

    # --- outcomes ---------------------------------------------------------------------------------
    def record(self, started: float, ttft_s: float, latency_s: float, prompt_tokens: int, cached_tokens: int) -> None:
        """A client request finished: count it for the window it started in (after its burn-in)."""
        for w in (self.current, self.previous):
            if w is not None and w.start <= started < w.end:
                if started < w.burn_end:
                    return
                w.n += 1
                w.ttft += ttft_s
                w.latency += latency_s
                w.prompt += max(0, prompt_tokens)
                w.cached += max(0, min(cached_tokens, prompt_tokens))
                return
        if self.state == "experiment":
            self.dropped += 1

    # --- inference --------------------------------------------------------------------------------
    def estimate(self, windows: list[Window] | None = None) -> Estimate | None:
        ws = self.batch if windows is None else windows
        if not ws:
            return None
        on = [w.on for w in ws]
        # Only covariates the policy cannot move: prompt tokens per request (the workload's content).
        # Request rate is reported, not adjusted for: agent clients are closed loops (a session sends
        # its next request when the last one answered), so a slower policy lowers the rate, and
        # adjusting for it would absorb the very effect being measured. Likewise uncached tokens.
        cov = {"prompt_tokens_per_request": [w.prompt / w.n for w in ws]}
        conf = self.config.confidence
        ttft = effect([w.ttft / w.n for w in ws], on, cov, conf)
        lat = effect([w.latency / w.n for w in ws], on, cov, conf)
        return {
            "windows_on": sum(on),
            "windows_off": len(ws) - sum(on),
            "confidence": conf,
            "hit_ratio_on": _hit(ws, True),
            "hit_ratio_off": _hit(ws, False),
            "request_rate_on": _rate(ws, True),
            "request_rate_off": _rate(ws, False),
            "uncached_tokens_per_request_on": _uncached(ws, True),
            "uncached_tokens_per_request_off": _uncached(ws, False),
            "ttft": _plain(ttft),
            "latency": _plain(lat),
        }

    def _decide(self, now: float, events: list[tuple[str, dict[str, object]]]) -> None:
        cfg = self.config
        est = self.estimate()
        self.batch = []
        ttft = est["ttft"] if est else None
        if ttft is None:
            verdict = "inconclusive"
        elif ttft["low"] > cfg.harm_margin * ttft["off_mean"]:
            verdict = "harmful"
        elif ttft["high"] < 0:
            verdict = "helpful"
        else:
            verdict = "inconclusive"
        self.decisions[verdict] += 1
        self.last_decision = {"verdict": verdict, "estimate": est}
        events.append(("decision", dict(self.last_decision)))
        if verdict == "harmful":
            self.state = "observe_only"
            self.retry_at = now + cfg.retry_s
            self.block = []
            events.append(("observe_only", {"retry_in_s": cfg.retry_s}))
        elif verdict == "helpful":
            self.control_share = cfg.control_share_confident
            self.block = []
        else:
            self.control_share = cfg.control_share

    # --- export -----------------------------------------------------------------------------------
    def describe(self, now: float) -> dict[str, object]:
        cur = self.current
        return {
            "mode": self.config.mode,
            "state": self.state,
            "policy_active": self.active(),
            "control_share": self.control_share,
            "window": None
            if cur is None
            else {
                "index": cur.index,
                "arm": "on" if cur.on else "off",
                "ends_in_s": round(cur.end - now, 3),
                "burn_in_left_s": round(max(0.0, cur.burn_end - now), 3),
                "counted_requests": cur.n,
            },
            "retry_in_s": None if self.retry_at is None else round(self.retry_at - now, 3),
            "windows": dict(self.windows),
            "decisions": dict(self.decisions),
            "dropped_outcomes": self.dropped,
            "batch_windows": len(self.batch),
            "decision_windows": self.config.decision_windows,
            "current_estimate": self.estimate(),
            "last_decision": self.last_decision,
        }


def _hit(ws: list[Window], on: bool) -> float | None:
    prompt = sum(w.prompt for w in ws if w.on == on)
    return round(sum(w.cached for w in ws if w.on == on) / prompt, 4) if prompt else None


def _rate(ws: list[Window], on: bool) -> float | None:
    span = sum(w.end - w.burn_end for w in ws if w.on == on)
    return round(sum(w.n for w in ws if w.on == on) / span, 4) if span > 0 else None


def _uncached(ws: list[Window], on: bool) -> float | None:
    n = sum(w.n for w in ws if w.on == on)
    return round(sum(w.prompt - w.cached for w in ws if w.on == on) / n, 1) if n else None


def _plain(e: EffectEstimate | None) -> EffectDict | None:
    if e is None:
        return None
    return {
        "effect": e.effect,
        "low": e.low,
        "high": e.high,
        "se": e.se,
        "df": e.df,
        "relative": e.relative,
        "relative_low": e.relative_low,
        "relative_high": e.relative_high,
        "on_mean": e.on_mean,
        "off_mean": e.off_mean,
        "adjusted_for": list(e.covariates),
    }
