"""Self-evaluation, pure parts: the window statistics, the switchback schedule and decisions, the
per-signal yield ledger, and the planner's gate hook. Deterministic (seeded), no sockets."""

from __future__ import annotations

import random

import pytest

from proxy.core.switchback_experiment import Switchback, SwitchbackConfig
from proxy.core.window_stats import effect, t_quantile
from proxy.core.yield_ledger import YieldConfig, YieldLedger, counterfactual_cached, remaining_life

from .test_planner import PIPE, fresh, learn


# --- window statistics ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "p, df, want",
    [
        (0.95, 1, 6.314),
        (0.95, 2, 2.920),
        (0.95, 3, 2.353),
        (0.95, 5, 2.015),
        (0.975, 10, 2.228),
        (0.975, 4, 2.776),
        (0.95, 30, 1.697),
        (0.975, 1000, 1.962),
    ],
)
def test_t_quantile_matches_tables(p, df, want):
    assert t_quantile(p, df) == pytest.approx(want, rel=0.01)


def test_effect_needs_two_windows_per_arm():
    assert effect([1.0, 2.0, 3.0], [True, True, False]) is None


def test_effect_is_the_difference_of_window_means_without_covariates():
    y = [1.0, 1.2, 0.9, 1.1, 2.0, 2.2, 1.9, 2.1]
    on = [False] * 4 + [True] * 4
    e = effect(y, on, confidence=0.9)
    assert e.effect == pytest.approx(1.0)
    assert e.off_mean == pytest.approx(1.05) and e.relative == pytest.approx(1.0 / 1.05)
    # Welch-free pooled t: se = s * sqrt(1/4 + 1/4), s^2 = pooled variance of the two arms
    s2 = (sum((v - 1.05) ** 2 for v in y[:4]) + sum((v - 2.05) ** 2 for v in y[4:])) / 6
    assert e.se == pytest.approx((s2 * 0.5) ** 0.5)
    assert e.df == 6 and e.low < 1.0 < e.high
    assert e.low == pytest.approx(1.0 - t_quantile(0.95, 6) * e.se)


def test_load_adjustment_removes_a_confounded_load_difference():
    # TTFT grows with prompt tokens; the on windows happen to carry more load. True effect: -0.05 s.
    rng = random.Random(3)
    load = [1000, 1100, 900, 1050, 1900, 2100, 2000, 1800, 950, 2050, 1000, 1950]
    on = [False, False, False, False, True, True, True, True, False, True, False, True]
    y = [0.1 + 0.0001 * x - 0.05 * z + rng.gauss(0, 0.002) for x, z in zip(load, on, strict=True)]
    raw = effect(y, on)  # no covariates: load makes "on" look harmful
    adj = effect(y, on, {"prompt_tokens_per_request": load})
    assert raw.effect > 0.03 and raw.low > 0
    assert adj.covariates == ("prompt_tokens_per_request",)
    assert adj.effect == pytest.approx(-0.05, abs=0.01) and adj.high < 0


def test_constant_or_too_many_covariates_are_dropped():
    y = [1.0, 1.1, 2.0, 2.1]
    on = [False, False, True, True]
    e = effect(y, on, {"rate": [5.0, 5.0, 5.0, 5.0], "prompt": [1.0, 2.0, 3.0, 4.0]})
    assert e.covariates == () and e.df == 2  # 4 windows leave no room for a covariate


# --- switchback ------------------------------------------------------------------------------------
CFG = SwitchbackConfig(
    window_min_s=10,
    window_max_s=20,
    burn_in_min_s=2,
    decision_windows=8,
    min_window_requests=3,
    start_after_s=0,
    retry_s=100,
)


def drive(
    sb: Switchback,
    until: float,
    ttft_on: float,
    ttft_off: float,
    now: float = 0.0,
    step: float = 0.5,
    noise: float = 0.01,
    seed: int = 1,
    turnover: float | None = None,
):
    """Ticks every `step` s; one request per step whose TTFT depends on the arm it started in."""
    rng = random.Random(seed)
    arms = []
    while now < until:
        sb.tick(now, turnover)
        on = sb.active()
        arms.append((now, on, sb.state))
        t = (ttft_on if on else ttft_off) + rng.gauss(0, noise)
        sb.record(now, t, t + 0.2, 1000, 800 if on else 400)
        now += step
    return arms


def test_schedule_is_randomised_blocks_with_burn_in():
    sb = Switchback(CFG, random.Random(7), 0.0)
    drive(sb, 400, 0.1, 0.1, turnover=3.0)
    w = sb.describe(400)
    assert w["windows"]["on"] + w["windows"]["off"] >= 20
    # control share 0.5 -> blocks of two windows, exactly one observe-only in each
    sb2 = Switchback(CFG, random.Random(7), 0.0)
    lengths, arms, burns = [], [], []
    for _ in range(20):
        win = sb2._open(0.0, 3.0)
        lengths.append(win.end - win.start)
        arms.append(win.on)
        burns.append(win.burn_end - win.start)
    assert all(10 <= x <= 20 for x in lengths) and len({round(x, 6) for x in lengths}) == 20
    assert all(sum(arms[i : i + 2]) == 1 for i in range(0, 20, 2))
    assert arms != [True, False] * 10 and arms != [False, True] * 10  # not a fixed alternation
    assert all(b == 3.0 for b in burns)  # one turnover (> min 2 s)
    win = sb2._open(0.0, 100.0)
    assert win.burn_end - win.start == pytest.approx(0.5 * (win.end - win.start))  # capped at half


def test_burn_in_requests_and_late_outcomes_are_not_counted():
    sb = Switchback(CFG, random.Random(1), 0.0)
    sb.tick(0.0)
    cur = sb.current
    sb.record(cur.start + 1.0, 9.0, 9.0, 100, 0)  # inside the 2 s burn-in
    sb.record(cur.start + 3.0, 0.1, 0.2, 100, 50)
    assert cur.n == 1 and cur.ttft == pytest.approx(0.1)
    sb.record(-50.0, 0.1, 0.2, 100, 50)  # started in a window long closed
    assert sb.dropped == 1


def test_harmful_policy_goes_observe_only_then_retries():
    sb = Switchback(CFG, random.Random(2), 0.0)
    arms = drive(sb, 400, ttft_on=0.30, ttft_off=0.10)
    off_at = next(t for t, _, state in arms if state == "observe_only")
    assert sb.decisions["harmful"] >= 1
    assert off_at < 8 * 20 + 20 + 1  # within one batch of 8 windows (<= 20 s each)
    d = sb.last_decision
    assert d["verdict"] == "harmful"
    t = d["estimate"]["ttft"]
    assert t["low"] > 0 and t["effect"] == pytest.approx(0.2, abs=0.02)
    assert d["estimate"]["hit_ratio_on"] == pytest.approx(0.8) and d["estimate"]["hit_ratio_off"] == pytest.approx(0.4)
    # observe-only: no action for retry_s, then a fresh experiment
    during = [on for t_, on, state in arms if off_at <= t_ < off_at + 99]
    assert during and not any(during)
    assert any(state == "experiment" for t_, _, state in arms if t_ > off_at + 100.5)


def test_helpful_policy_stays_on_and_shrinks_the_control_share():
    sb = Switchback(CFG, random.Random(4), 0.0)
    arms = drive(sb, 600, ttft_on=0.08, ttft_off=0.12)
    assert sb.decisions["harmful"] == 0 and sb.decisions["helpful"] >= 1
    assert sb.state == "experiment" and sb.control_share == CFG.control_share_confident
    assert sb.last_decision["estimate"]["ttft"]["high"] < 0
    late = [on for t, on, _ in arms if t > 400]
    assert sum(late) / len(late) > 0.65  # mostly acting once found helpful


def test_no_effect_is_rarely_called_harmful():
    harmful = 0
    for seed in range(20):
        sb = Switchback(CFG, random.Random(seed), 0.0)
        drive(sb, 200, ttft_on=0.1, ttft_off=0.1, noise=0.02, seed=seed + 100)
        harmful += sb.decisions["harmful"]
    assert harmful <= 3  # one-sided 5% per decision (90% two-sided)


@pytest.mark.parametrize("mode, active", [("on", True), ("off", False)])
def test_operator_pins(mode, active):
    sb = Switchback(SwitchbackConfig(mode=mode, start_after_s=0), random.Random(0), 0.0)
    arms = drive(sb, 300, ttft_on=1.0, ttft_off=0.1)
    assert all(on == active for _, on, _ in arms) and sum(sb.decisions.values()) == 0


def test_policy_acts_before_the_experiment_starts():
    sb = Switchback(SwitchbackConfig(start_after_s=50, window_min_s=10, window_max_s=10), random.Random(0), 0.0)
    sb.tick(49.0)
    assert sb.active() and sb.state == "starting"
    sb.tick(50.0)
    assert sb.state == "experiment" and sb.current is not None


def test_bad_mode_is_refused():
    with pytest.raises(ValueError):
        Switchback(SwitchbackConfig(mode="maybe"), random.Random(0), 0.0)


# --- yield ledger ------------------------------------------------------------------------------------
def test_counterfactual_follows_the_shadow():
    assert counterfactual_cached(300, None, 0, 10**9) == 300  # unknown capacity: it would stay
    assert counterfactual_cached(300, 500.0, 1000, 1400) == 300  # survived: the hit was free anyway
    assert counterfactual_cached(300, 500.0, 1000, 1600) == 0  # would have been evicted
    assert counterfactual_cached(0, 500.0, 0, 0) == 0
    assert remaining_life(0, 100, True) is None
    assert remaining_life(1000, 200, True) == 100 and remaining_life(1000, 200, False) == 900


def test_negative_yield_throttles_with_an_exploration_floor_and_recovers():
    led = YieldLedger(
        YieldConfig(half_life_s=100, min_evidence_tokens=1000, explore_interval_s=10), ("transition", "hint")
    )
    for k in range(5):
        led.record_spent("transition", 400, True, float(k))  # 2000 contended tokens, nothing saved
    assert led.throttled("transition", 5.0) and not led.throttled("hint", 5.0)
    assert led.allow("transition", "warm", 5.0)  # the exploration floor
    assert not led.allow("transition", "warm", 6.0) and not led.allow("transition", "touch", 14.0)
    assert led.allow("transition", "retain", 6.0)  # costs the engine nothing
    assert led.allow("transition", "warm", 15.0)
    assert led.snapshot(15.0)["transition"].held_back == 2
    led.record_saved("transition", 2500, 16.0)  # the explored action paid
    assert not led.throttled("transition", 16.0) and led.allow("transition", "warm", 16.5)


def test_evidence_decays_and_idle_spending_is_cheaper():
    led = YieldLedger(YieldConfig(half_life_s=10, min_evidence_tokens=100, idle_cost_share=0.25))
    led.record_spent("fanout", 1000, False, 0.0)
    assert led.snapshot(0.0)["fanout"].spent_tokens == pytest.approx(250)
    assert led.snapshot(10.0)["fanout"].spent_tokens == pytest.approx(125)
    assert led.snapshot(60.0)["fanout"].spent_tokens < 100 and not led.throttled("fanout", 60.0)


def test_disabled_ledger_accounts_but_never_throttles():
    led = YieldLedger(YieldConfig(enabled=False, min_evidence_tokens=0))
    led.record_spent("hint", 10_000, True, 0.0)
    assert led.allow("hint", "warm", 1.0) and led.snapshot(1.0)["hint"].yield_tokens < 0


# --- the planner's gate hook -------------------------------------------------------------------------
def test_planner_gate_hook_vetoes_actions_and_sees_reason_and_kind(workload):
    def run(gate):
        w = workload(residency_capacity_tokens=16 * 60)
        w.policy.planner.action_gate = gate
        now = fresh(w, learn(w, PIPE))
        w.junk(16 * 80, now)
        w.step(0, "live", now + 1)
        return w.policy.plan(now + 1.2), w.policy.planner

    asked = []
    actions, _ = run(lambda reason, kind, now: asked.append((reason, kind)) or True)
    assert actions and [(a.reason, a.kind) for a in actions] == asked
    vetoed, planner = run(lambda reason, kind, now: False)
    assert vetoed == [] and not planner.inflight and not planner.emitted  # nothing charged or counted
