"""Every planner decision says why: each stage counted in Planner.skipped and noted in the bounded
ring (core/decisions.py) with the figures it compared."""

from __future__ import annotations

import random
import sys

from proxy.core import EngineLoad, ResponseOutcome, ScoutPolicy
from proxy.core.actions import REASON_TRANSITION
from proxy.core.decisions import ACTED, ENTRY_BYTES_MAX, DecisionLog
from proxy.core.plan_registry import OUTCOMES, SKIP_REASONS

from .conftest import Workload, quiet_config
from .test_planner import PIPE, fresh, learn


def rows(w: Workload, outcome: str) -> list[dict[str, object]]:
    return [r for r in w.policy.planner.decisions.rows() if r["outcome"] == outcome]


def test_a_shut_r_gate_is_counted_and_says_its_r(workload):
    w = workload(residency_capacity_tokens=16 * 60, r_min=0.3, top_k=6, tau=0.0)
    rng = random.Random(0)
    now = fresh(w, learn(w, [rng.randrange(6) for _ in range(150)], sessions=1))
    w.junk(16 * 80, now)
    obs = w.step(0, "live", now + 1)
    before = w.policy.planner.skipped["gate_closed"]
    assert w.policy.plan(now + 1.1) == []
    assert w.policy.planner.skipped["gate_closed"] == before + 1
    last = rows(w, "gate_closed")[-1]
    assert last["reason"] == REASON_TRANSITION and last["anchor"] == obs.agent_id
    # the ring says which piece: offered by the successors source, dropped by the gate filter
    assert (last["source"], last["stage"], last["by"]) == ("successors", "filter", "gate")
    assert isinstance(last["r"], float) and last["r"] < 0.3
    assert last["r"] == round(w.policy.stats().predictability, 4)


def test_a_gate_without_enough_transitions_is_shut_with_no_r(workload):
    w = workload(residency_capacity_tokens=16 * 60, r_min_transitions=50)
    now = fresh(w, learn(w, PIPE, sessions=2))
    w.step(0, "live", now + 1)
    assert w.policy.plan(now + 1.1) == []
    last = rows(w, "gate_closed")[-1]
    assert "r" not in last and last["count"] >= 1


def test_acted_carries_the_economics_figures(workload):
    w = workload(residency_capacity_tokens=16 * 60)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    (action,) = w.policy.plan(now + 1.2)
    (row,) = [r for r in rows(w, ACTED) if r["anchor"] == action.anchor_id]
    assert row["kind"] == "warm" == action.kind and row["reason"] == REASON_TRANSITION
    assert (row["source"], row["stage"], row["by"]) == ("successors", "picker", "picker")
    assert row["missing"] == action.tokens and row["saving"] > row["cost"] >= 0
    assert 0 < row["p_kept"] <= 1 and 0 < row["p"] <= 1 and row["r"] >= w.policy.config.r_min
    assert ACTED not in w.policy.planner.skipped  # an action is not a skip


def test_not_worth_it_records_the_saving_and_cost_it_compared(workload):
    w = workload(residency_capacity_tokens=16 * 60)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    # a client request in flight and the engine busy prefilling: the warm's engine time is dear
    assert w.policy.plan(now + 1.2, EngineLoad(inflight=1, utilisation=1.0)) == []
    assert w.policy.planner.skipped["not_worth_it"] == 1
    (row,) = rows(w, "not_worth_it")
    assert row["kind"] == "warm" and 0 <= row["saving"] <= row["cost"] and "p_kept" in row


def test_successor_cooldown_is_counted(workload):
    w = workload(residency_capacity_tokens=16 * 60, cooldown_s=10.0)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    (first,) = w.policy.plan(now + 1.2)
    w.junk(16 * 80, now + 2)
    w.step(0, "live2", now + 3)
    before = w.policy.planner.skipped["cooldown"]
    assert w.policy.plan(now + 3.1) == []
    assert w.policy.planner.skipped["cooldown"] == before + 1
    assert rows(w, "cooldown")[-1]["anchor"] == first.anchor_id


def test_the_resident_memo_is_counted(workload):
    w = workload(residency_capacity_tokens=16 * 100)
    now = fresh(w, learn(w, PIPE, sessions=1))
    w.step(0, "live", now + 1)
    w.policy.plan(now + 1.1)  # agent 1's anchor is resident and safe: memoised
    before = w.policy.planner.skipped["resident"]
    w.step(0, "live2", now + 2)
    assert w.policy.plan(now + 2.1) == []
    assert w.policy.planner.skipped["resident"] > before  # the memo hit, in the successor loop
    assert rows(w, "resident")[-1]["anchor"] == w.policy.agents.tenant("").by_slot[1].agent_id


def test_duplicates_in_one_tick_are_counted(workload):
    w = workload(residency_capacity_tokens=16 * 60)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "a", now + 1)
    w.step(0, "b", now + 1)
    assert len(w.policy.plan(now + 1.1)) == 1
    assert w.policy.planner.skipped["duplicate"] == 1


def test_deferral_to_the_response_end_is_counted():
    w = Workload(ScoutPolicy(quiet_config(residency_capacity_tokens=16 * 60, plan_trigger="auto")))
    now = 0.0
    for s in range(4):
        for agent in PIPE:
            w.step(agent, f"l{s}", now, dur=0.1)
            now += 1.1
    w.policy.plan(now + 100)
    now = fresh(w, now + 200)
    w.junk(16 * 80, now)
    before = w.policy.planner.skipped["deferred"]
    obs = w.policy.observe_request(w.view(0, "live"), now + 1)
    assert w.policy.plan(now + 1.01) == []
    assert w.policy.planner.skipped["deferred"] == before + 1  # not marked dirty at the request
    assert rows(w, "deferred")[-1]["anchor"] == obs.agent_id
    w.policy.observe_response(obs.request_id, ResponseOutcome("stop"), now + 1.5)
    assert len(w.policy.plan(now + 1.51)) == 1


def test_tick_skips_are_noted_without_a_candidate(workload):
    w = workload(residency_capacity_tokens=16 * 60, max_engine_waiting=2)
    now = fresh(w, learn(w, PIPE))
    w.step(0, "live", now + 1)
    for k in range(3):
        assert w.policy.plan(now + 1.1 + k, EngineLoad(waiting=5)) == []
    last = w.policy.planner.decisions.rows()[-1]
    assert last["outcome"] == "tick_engine_busy" and last["source"] == last["anchor"] == "" and last["count"] == 3
    assert last["stage"] == last["by"] == "tick"


def test_every_counted_reason_is_an_outcome():
    assert set(ScoutPolicy(quiet_config()).planner.skipped) == set(SKIP_REASONS) == set(OUTCOMES) - {ACTED}


def test_the_ring_is_bounded_and_holds_no_salt():
    log = DecisionLog(size=64)
    salt = "tenant-secret-salt"
    for i in range(10_000):
        log.note(
            float(i), "not_worth_it", "pricer", "successors", "transition", f"{i:012x}", salt, "warm",
            0.9, 0.5, 100.0, 2.0, 3.0, 4.0, 0.7,
        )  # fmt: skip
    assert len(log.ring) == 64
    size = sum(sys.getsizeof(e) + sum(sys.getsizeof(x) for x in e) for e in log.ring)
    assert size <= 64 * ENTRY_BYTES_MAX
    out = log.rows(now=10_000.0)
    assert out[0]["anchor"] == f"{10_000 - 64:012x}" and out[-1]["s_ago"] == 1.0
    assert all(r["tenant"] == f"salt:{len(salt)}c" for r in out)
    assert salt not in repr(out) and salt not in repr(log.ring)


def test_repeats_fold_into_one_entry():
    log = DecisionLog(size=4)
    for i in range(5):
        log.note(float(i), "resident", "resident", "anchor_sweep", "hint", "abc")
    log.note(5.0, "acted", "picker", "anchor_sweep", "hint", "abc", kind="touch")
    assert [(r["outcome"], r["count"], r["at"]) for r in log.rows()] == [("resident", 5, 4.0), ("acted", 1, 5.0)]
    assert log.top() == [("resident", 5), ("acted", 1)]
