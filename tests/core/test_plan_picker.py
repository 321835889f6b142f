"""The pricer, the picker and the veto (plan_picker.py): the best net values within the tick's
slots and the bucket, and the outside action_gate holding actions back unless switched off."""

from __future__ import annotations

from proxy.core.actions import REASON_TRANSITION
from proxy.core.view import EngineLoad

from .test_decisions import rows
from .test_planner import PIPE, fresh, learn


def _one_warm(workload, **kw):
    w = workload(residency_capacity_tokens=16 * 60, **kw)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    return w, now + 1.2


def test_the_pricer_prices_in_engine_tokens_and_the_picker_spends_the_bucket(workload):
    w, t = _one_warm(workload)
    bucket = w.policy.planner.bucket
    (a,) = w.policy.plan(t)
    assert a.kind == "warm" and a.reason == REASON_TRANSITION
    assert w.policy.planner.bucket == bucket - a.tokens  # a warm costs its missing tokens
    (row,) = rows(w, "acted")
    assert row["saving"] > row["cost"]


def test_an_empty_bucket_is_the_budget_stage(workload):
    w, t = _one_warm(workload)
    w.policy.planner.bucket = 0.0
    w.policy.planner._refilled = t
    assert w.policy.plan(t) == [] and rows(w, "budget")


def test_the_veto_holds_back_and_can_be_switched_off(workload):
    w, t = _one_warm(workload)
    asked = []
    w.policy.planner.action_gate = lambda reason, kind, now: asked.append((reason, kind)) or False
    assert w.policy.plan(t) == [] and asked == [(REASON_TRANSITION, "warm")] and rows(w, "vetoed")
    w, t = _one_warm(workload, disabled_pieces=("action_gate",))
    w.policy.planner.action_gate = lambda reason, kind, now: False
    assert len(w.policy.plan(t)) == 1


def test_a_warm_priced_out_only_by_decoding_clients_waits_and_says_so(workload):
    """Clients decoding make a warm's prefill their wait (economics.queueing): the warm that pays on
    an idle engine is held as `wait_for_decodes`, with the saving and the cost it compared, and made
    at a later tick once nobody decodes."""
    w, t = _one_warm(workload)
    assert w.policy.plan(t, EngineLoad(inflight=50, decoding=50)) == []
    (row,) = rows(w, "wait_for_decodes")
    assert row["cost"] > row["saving"] > 0
    (a,) = w.policy.plan(t + 0.1)
    assert a.kind == "warm"
