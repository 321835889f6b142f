"""The price of bringing an evicted anchor back: a load where the engine has a host tier, a
recompute where not (issue 15), and the tool-pause prefetch timed to land before the resume."""

from __future__ import annotations

import pytest

from proxy.core import PolicyConfig, ScoutPolicy
from proxy.core.actions import REASON_TOOL_RESUME, REASON_TRANSITION

from .conftest import Workload, quiet_config


def test_reload_is_a_recompute_without_a_host_tier_and_a_load_with_one():
    cfg = PolicyConfig(prefill_tokens_per_s=10_000.0)
    assert cfg.reload_s(5000) == pytest.approx(0.5)
    assert cfg.reload_cost_tokens(5000) == 5000
    tier = cfg.with_overrides(reload_tokens_per_s=400_000.0, reload_latency_s=0.002)
    assert tier.reload_s(4000) == pytest.approx(0.012)
    assert tier.reload_cost_tokens(4000) == pytest.approx(120.0)  # 12 ms of engine time at 10k tokens/s
    assert tier.reload_s(0) == 0.0


def _paused(prefill_tokens_per_s, **kw):
    """Agent 0 ends with tool_calls and its session comes back 0.5 s later, every time; then its
    context and every anchor are evicted from the GPU (the host tier, when there is one, keeps them)."""
    kw.setdefault("resume_wake_margin_s", 0.0)  # 0.5 s pauses: the load window, not the live tick, is tested
    w = Workload(
        ScoutPolicy(quiet_config(residency_capacity_tokens=16 * 60, prefill_tokens_per_s=prefill_tokens_per_s, **kw))
    )
    now = 0.0
    for s in range(8):
        for agent in (0, 1, 2):
            w.step(agent, f"l{s}", now, finish="tool_calls" if agent == 0 else "stop", dur=0.1)
            now += 0.6
    w.policy.plan(now + 100)
    p = w.policy.planner
    now += 200
    p.last_acted.clear()
    p.inflight.clear()
    p.resident.memo.clear()
    p.bucket = w.policy.config.warm_budget()[1]
    p._refilled = now
    w.step(0, "live", now, finish="tool_calls", dur=0.1)
    w.junk(16 * 80, now + 0.1)
    return w, now


HOST = {"host_tier_tokens": 16 * 2000, "reload_tokens_per_s": 1_000_000.0, "reload_latency_s": 0.002}


def test_a_host_tier_turns_a_too_slow_warm_into_a_prefetch():
    w, now = _paused(100.0)  # recompute: 1.3 s > the 0.49 s lead
    assert w.policy.plan(now + 0.11) == []
    w, now = _paused(100.0, **HOST)  # load: ~2 ms
    acts = w.policy.plan(now + 0.11)
    kinds = {(a.kind, a.reason) for a in acts}
    assert ("touch", REASON_TOOL_RESUME) in kinds and ("touch", REASON_TRANSITION) in kinds
    assert all(a.kind == "touch" for a in acts)  # a load, not a recompute
    assert w.policy.host_residency.resident_prefix(acts[0].block_hashes) == len(acts[0].block_hashes)


def test_prefetch_waits_until_the_load_would_land_just_before_the_resume():
    w, now = _paused(100.0, prefetch_window_s=0.1, sweep_interval_s=0.05, **HOST)
    early = w.policy.plan(now + 0.11)  # resume in ~0.49 s: too early to load
    assert not [a for a in early if a.reason == REASON_TOOL_RESUME]
    late = w.policy.plan(now + 0.56)  # ~0.04 s left: inside load time + window (the resume's wake came)
    assert [a for a in late if a.reason == REASON_TOOL_RESUME and a.kind == "touch"]


def test_warm_budget_charges_a_load_at_its_engine_time():
    w, now = _paused(5000.0, **HOST)
    before = w.policy.planner.bucket
    acts = w.policy.plan(now + 0.11)
    assert acts
    spent = before - w.policy.planner.bucket
    assert spent < sum(a.tokens for a in acts) / 10  # far below the recompute price
