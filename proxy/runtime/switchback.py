"""Live self-evaluation: drives the switchback experiment (``core/switchback_experiment.py``) and the per-signal
yield ledger (``core/yield_ledger.py``) from the running proxy, and says what they found.

Why here and not in the core: the core decides; this edge owns the clock, the seeded randomness,
the log lines an operator reads ("policy is hurting TTFT here: observe-only for 30 min") and the
`cachescout_switchback_*` / `cachescout_signal_*` metrics. The planner asks `gate(reason, kind,
now)` before it emits an action: False in an observe-only window (or while the proxy has switched
itself to observe-only), and for a throttled signal beyond its exploration floor. The policy keeps
learning either way; only actions (and opt-in body rewrites) stop.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from proxy.core.plan_registry import ACTION_REASONS
from proxy.core.switchback_experiment import Switchback, SwitchbackConfig
from proxy.core.yield_ledger import YieldConfig, YieldLedger

if TYPE_CHECKING:
    from proxy.observability.metrics import ProxyMetrics
    from proxy.settings import Settings

log = logging.getLogger("cachescout.switchback")

BOUNDS = ("estimate", "low", "high")
NAN = float("nan")
YIELD_PUBLISH_S = 1.0


def switchback_config(settings: Settings) -> SwitchbackConfig:
    return SwitchbackConfig(
        mode=str(settings.switchback),
        window_min_s=float(settings.switchback_window_min_s),
        window_max_s=float(settings.switchback_window_max_s),
        burn_in_min_s=float(settings.switchback_burn_in_min_s),
        control_share_confident=float(settings.switchback_control_share_confident),
        decision_windows=int(settings.switchback_decision_windows),
        min_window_requests=int(settings.switchback_min_window_requests),
        confidence=float(settings.switchback_confidence),
        harm_margin=float(settings.switchback_harm_margin),
        retry_s=float(settings.switchback_retry_s),
        start_after_s=float(settings.switchback_start_after_s),
    )


def yield_config(settings: Settings) -> YieldConfig:
    return YieldConfig(
        enabled=bool(settings.yield_throttle),
        half_life_s=float(settings.yield_half_life_s),
        min_evidence_tokens=float(settings.yield_min_evidence_tokens),
        explore_interval_s=float(settings.yield_explore_interval_s),
        idle_cost_share=float(settings.yield_idle_cost_share),
    )


class SelfEvaluation:
    def __init__(
        self,
        switchback: SwitchbackConfig,
        yields: YieldConfig,
        metrics: ProxyMetrics | None,
        clock: Callable[[], float],
        seed: int | None = None,
        turnover_s: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.metrics = metrics
        self.clock = clock
        self.turnover_s = turnover_s
        self.experiment = Switchback(switchback, random.Random(seed), clock())
        self.ledger = YieldLedger(yields, ACTION_REASONS)
        self._active = self.experiment.active()
        self._throttled: dict[str, bool] = {}
        self._yields_at = float("-inf")
        self._publish_state()

    # -- the planner's gate ---------------------------------------------------------------------
    def active(self) -> bool:
        return self._active

    def gate(self, reason: str, kind: str, now: float) -> bool:
        if not self._active:
            return False
        if self.ledger.allow(reason, kind, now):
            return True
        if self.metrics is not None:
            self.metrics.signal_held_back_total.labels(reason).inc()
        return False

    # -- inputs -------------------------------------------------------------------------------------
    def record_outcome(
        self, started: float, ttft_s: float, latency_s: float, prompt_tokens: int, cached_tokens: int
    ) -> None:
        self.experiment.record(started, ttft_s, latency_s, prompt_tokens, cached_tokens)

    def record_spent(self, reason: str, tokens: int, contended: bool, now: float) -> None:
        self.ledger.record_spent(reason, tokens, contended, now)
        if self.metrics is not None:
            self.metrics.signal_spent_tokens_total.labels(reason, "yes" if contended else "no").inc(max(0, tokens))

    def record_saved(self, reason: str, tokens: int, now: float) -> None:
        self.ledger.record_saved(reason, tokens, now)
        if self.metrics is not None:
            self.metrics.signal_saved_tokens_total.labels(reason).inc(max(0, tokens))

    # -- time -----------------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Called by the runtime's plan tick: advance the schedule, log and publish what changed."""
        exp = self.experiment
        turnover = None
        try:
            turnover = self.turnover_s()
        except Exception:  # noqa: BLE001 - a missing estimate only shortens the burn-in
            turnover = None
        events = exp.tick(now, turnover)
        for kind, info in events:
            self._event(kind, info)
        was, self._active = self._active, exp.active()
        # gauges change only with an event (a window closed: new estimate) or a switch; the yields
        # decay slowly: publish them once a second, not on every 0.25 s tick
        if events or was != self._active:
            self._publish_state()
        if now - self._yields_at >= YIELD_PUBLISH_S:
            self._yields_at = now
            self._publish_yields(now)

    def _event(self, kind: str, info: dict) -> None:
        m = self.metrics
        if kind == "window":
            log.debug("switchback window %s closed: %s", info["index"], info)
            if m is not None:
                m.switchback_windows_total.labels(info["arm"], "yes" if info["usable"] else "no").inc()
        elif kind == "decision":
            verdict, est = info["verdict"], info["estimate"] or {}
            t = est.get("ttft") or {}
            log.info(
                "switchback decision: %s; TTFT effect %+.1f%% [%+.1f%%, %+.1f%%] (%s on / %s off "
                "windows, adjusted for %s); hit ratio on %s off %s",
                verdict,
                100 * t.get("relative", 0.0),
                100 * t.get("relative_low", 0.0),
                100 * t.get("relative_high", 0.0),
                est.get("windows_on"),
                est.get("windows_off"),
                ",".join(t.get("adjusted_for", [])) or "nothing",
                est.get("hit_ratio_on"),
                est.get("hit_ratio_off"),
            )
            if m is not None:
                m.switchback_decisions_total.labels(verdict).inc()
        elif kind == "observe_only":
            log.warning(
                "cache actions hurt TTFT on this traffic: observe-only for %.0f s (still learning; "
                "pin with CACHESCOUT_SWITCHBACK=on|off)",
                info["retry_in_s"],
            )
        elif kind == "resume":
            log.info("switchback: acting again (%s)", info["reason"])

    # -- export -----------------------------------------------------------------------------------
    def _publish_state(self) -> None:
        m = self.metrics
        if m is None:
            return
        exp = self.experiment
        m.switchback_policy_active.set(1 if self._active else 0)
        m.switchback_observe_only.set(1 if exp.state == "observe_only" else 0)
        est = exp.last_decision["estimate"] if exp.last_decision else None
        cur = exp.estimate()
        for source, e in (("decision", est), ("running", cur)):
            t = e["ttft"] if e else None
            if e is None or t is None:  # no estimate (yet, or the batch just started): NaN, not stale
                for bound in BOUNDS:
                    m.switchback_ttft_effect_seconds.labels(source, bound).set(NAN)
                    m.switchback_ttft_effect_ratio.labels(source, bound).set(NAN)
                for arm in ("on", "off"):
                    m.switchback_hit_ratio.labels(source, arm).set(NAN)
                continue
            for bound, v in zip(BOUNDS, (t["effect"], t["low"], t["high"]), strict=True):
                m.switchback_ttft_effect_seconds.labels(source, bound).set(v)
            for bound, v in zip(BOUNDS, (t["relative"], t["relative_low"], t["relative_high"]), strict=True):
                m.switchback_ttft_effect_ratio.labels(source, bound).set(v)
            for arm, hit in (("on", e["hit_ratio_on"]), ("off", e["hit_ratio_off"])):
                m.switchback_hit_ratio.labels(source, arm).set(NAN if hit is None else hit)

    def _publish_yields(self, now: float) -> None:
        if self.metrics is None:
            return
        for reason, y in self.ledger.snapshot(now).items():
            self.metrics.signal_yield_tokens.labels(reason).set(y.yield_tokens)
            self.metrics.signal_throttled.labels(reason).set(1 if y.throttled else 0)
            was = self._throttled.get(reason, False)
            if y.throttled != was:
                self._throttled[reason] = y.throttled
                if y.throttled:
                    log.info(
                        "signal %s throttled: realised yield %+.0f tokens (saved %.0f, spent %.0f)",
                        reason,
                        y.yield_tokens,
                        y.saved_tokens,
                        y.spent_tokens,
                    )
                else:
                    log.info("signal %s no longer throttled: realised yield %+.0f tokens", reason, y.yield_tokens)

    def describe(self) -> dict[str, object]:
        now = self.clock()
        return {
            "switchback": self.experiment.describe(now),
            "signals": {
                r: {
                    "saved_tokens": round(y.saved_tokens, 1),
                    "spent_tokens": round(y.spent_tokens, 1),
                    "yield_tokens": round(y.yield_tokens, 1),
                    "throttled": y.throttled,
                    "actions": y.actions,
                    "conversions": y.conversions,
                    "held_back": y.held_back,
                }
                for r, y in self.ledger.snapshot(now).items()
            },
        }
