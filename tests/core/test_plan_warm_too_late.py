"""The opt-in ``warm_too_late`` filter (core/plan_warm_too_late.py): its rule on its own, and, in the
pipeline, off unless ``piece_params`` names it, then recorded under its own name."""

from __future__ import annotations

from proxy.core import ScoutPolicy
from proxy.core.config import PolicyConfig
from proxy.core.plan_warm_too_late import WarmTooLate, WarmTooLateParams

from .conftest import quiet_config
from .test_decisions import rows
from .test_plan_filters import cand, look
from .test_planner import PIPE, fresh, learn


def test_a_demand_sooner_than_the_warm_is_refused():
    f = WarmTooLate()
    x = look(PolicyConfig(prefill_tokens_per_s=64.0, min_lead_s=0.2))
    c = cand(lead=0.5)
    x.first(c)
    x.judge(c)
    assert x.missing == 64  # a 1 s warm at 64 tokens/s
    assert f.warm(c, x) == "warm_too_late"
    assert f.warm(cand(lead=1.5), x) is None and f.warm(cand(lead=None), x) is None
    f.configure(WarmTooLateParams(slack=2.0))
    assert f.warm(cand(lead=1.5), x) == "warm_too_late"  # 1.5 s < 2 × 1 s


def test_it_is_opt_in_and_named_in_the_ring(workload):
    assert not ScoutPolicy(PolicyConfig()).planner.enabled(WarmTooLate.name)
    # a slow engine: every warm of the pipeline's anchors takes longer than its lead
    on = {"piece_params": {WarmTooLate.name: {"slack": 1000.0}}}
    for params, refused in (({}, False), (on, True)):
        w = workload(residency_capacity_tokens=16 * 60, **params)
        now = fresh(w, learn(w, PIPE))
        w.junk(16 * 80, now)
        w.step(0, "live", now + 1)
        acts = w.policy.plan(now + 1.2)
        assert w.policy.planner.enabled(WarmTooLate.name) is refused
        assert (not any(a.kind == "warm" for a in acts)) is refused
        got = rows(w, "warm_too_late")
        assert bool(got) is refused and all(r["by"] == WarmTooLate.name and r["stage"] == "filter" for r in got)
    assert quiet_config(**on).piece_params == on["piece_params"]
