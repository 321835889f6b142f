"""Planner: Warm/Touch/Retain per residency, the gate, every budget, cool-down, dedupe, deadlines."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import EngineLoad, ResponseOutcome, ScoutPolicy
from proxy.core.action_payload import ActionPayload
from proxy.core.actions import REASON_FANOUT, REASON_SWEEP, REASON_TOOL_RESUME, REASON_TRANSITION

from .conftest import ANCHOR, BLOCK, Workload, quiet_config

ANCHOR_TOKENS = ANCHOR * BLOCK


def learn(w: Workload, chain, sessions=4, now=0.0, drain=True):
    """Run each session through ``chain`` (a list of agents); returns the time reached."""
    for s in range(sessions):
        for agent in chain:
            now += 1.0
            w.step(agent, f"learn{s}", now)
    if drain:
        w.policy.plan(now + 1000.0)  # consume learning-time dirt; sets cool-downs far in the past
    return now


def fresh(w: Workload, now):
    """Start a clean planning state (no cool-downs, full bucket) after learning."""
    p = w.policy.planner
    p.last_acted.clear()
    p.inflight.clear()
    p.resident.memo.clear()
    p.bucket = w.policy.config.warm_budget()[1]
    p._refilled = now
    return now


PIPE = [0, 1, 2] * 4


def test_warm_for_an_evicted_predicted_anchor(workload):
    w = workload(residency_capacity_tokens=16 * 60)
    now = fresh(w, learn(w, PIPE))
    assert w.policy.stats().gate_open
    w.junk(16 * 80, now)  # flush everything
    obs = w.step(0, "live", now + 1)
    actions = w.policy.plan(now + 1.2)
    warm = [a for a in actions if a.reason == REASON_TRANSITION]
    assert len(warm) == 1
    a = warm[0]
    assert a.kind == "warm" and a.payload == ActionPayload({"agent": 1}) and a.tokens == ANCHOR_TOKENS
    assert a.block_hashes == tuple(w.anchor(1)) and a.tenant == ""
    assert a.created == now + 1.2 and a.deadline == now + 1.2 + w.policy.config.action_ttl_s
    assert a.anchor_id == w.policy.agents.tenant("").by_slot[1].agent_id != obs.agent_id
    assert 0 < a.priority <= 100
    w.policy.record_action_result(a, True, now + 1.3)
    assert w.policy.residency.resident_prefix(a.block_hashes) == ANCHOR


def test_touch_for_a_resident_anchor_near_the_lru_tail_and_nothing_when_safe(workload):
    w = workload(residency_capacity_tokens=16 * 100)
    now = fresh(w, learn(w, PIPE, sessions=1))
    w.junk(16 * 200, now)
    w.step(1, "other", now + 1)  # agent 1's anchor: cached, oldest
    w.policy.plan(now + 1)  # (predicts 2 for that session)
    w.junk(16 * 75, now + 1)  # pushes it to the LRU tail
    w.step(0, "live", now + 2)
    actions = w.policy.plan(now + 2.1)
    assert [(a.kind, a.reason, a.payload) for a in actions] == [
        ("touch", REASON_TRANSITION, ActionPayload({"agent": 1}))
    ]
    # right after a touch the anchor is fresh: the next prediction of it does nothing
    w.policy.record_action_result(actions[0], True, now + 2.2)
    w.policy.planner.last_acted.clear()
    w.step(0, "live2", now + 3)
    assert w.policy.plan(now + 3.1) == []


def test_gate_shut_on_an_unpredictable_chain(workload):
    w = workload(residency_capacity_tokens=16 * 60, r_min=0.3, top_k=6, tau=0.0)
    rng = random.Random(0)
    now = fresh(w, learn(w, [rng.randrange(6) for _ in range(150)], sessions=1))
    st_ = w.policy.stats()
    assert st_.predictability < 0.3 and not st_.gate_open
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    assert w.policy.plan(now + 1.1) == []
    # the same state with the gate lowered does act: the gate is what stopped it
    w.policy.planner.cfg = w.policy.planner.cfg.with_overrides(r_min=0.0)
    w.step(0, "live", now + 2)
    assert w.policy.plan(now + 2.1)


def test_gate_stays_shut_until_enough_transitions(workload):
    w = workload(residency_capacity_tokens=16 * 60, r_min_transitions=50)
    now = fresh(w, learn(w, PIPE, sessions=2))  # 22 transitions
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    assert w.policy.plan(now + 1.1) == []


def star(w, n_workers=4, reps=30, now=0.0):
    """Supervisor 0 dispatches to workers 1..n uniformly-ish: fan-out predictions."""
    seq = []
    for k in range(reps):
        seq += [0, 1 + k % n_workers]
    return learn(w, seq, sessions=1, now=now)


def test_fanout_and_max_actions_per_tick(workload):
    w = workload(residency_capacity_tokens=16 * 60, top_k=4, tau=0.1, r_min=0.2, max_actions_per_tick=2, warm_top_k=4)
    now = fresh(w, star(w))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    actions = w.policy.plan(now + 1.1)
    assert len(actions) == 2
    assert [a.reason for a in actions] == [REASON_TRANSITION, REASON_FANOUT]
    assert all(a.kind == "warm" for a in actions)
    # next tick: the remaining two (dirty again after a new request), never the same anchors
    w.step(0, "live", now + 2)
    more = w.policy.plan(now + 2.1)
    assert len(more) == 2 and not {a.anchor_id for a in more} & {a.anchor_id for a in actions}


def test_max_concurrent_counts_unanswered_actions(workload):
    w = workload(residency_capacity_tokens=16 * 60, top_k=4, tau=0.1, r_min=0.2, max_concurrent=1, warm_top_k=4)
    now = fresh(w, star(w))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    first = w.policy.plan(now + 1.1)
    assert len(first) == 1
    w.step(0, "live", now + 1.2)
    assert w.policy.plan(now + 1.3) == []  # one still in flight
    w.policy.record_action_result(first[0], False, now + 1.4)
    w.step(0, "live", now + 1.5)
    assert len(w.policy.plan(now + 1.6)) == 1
    assert w.policy.stats().actions_failed == 1


def test_unanswered_actions_stop_counting_after_their_deadline(workload):
    w = workload(
        residency_capacity_tokens=16 * 60, top_k=4, tau=0.1, r_min=0.2, max_concurrent=1, action_ttl_s=1.0, warm_top_k=4
    )
    now = fresh(w, star(w))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    assert len(w.policy.plan(now + 1.1)) == 1
    w.step(0, "live", now + 5)  # > deadline + grace later
    assert len(w.policy.plan(now + 5.1)) == 1


def test_token_bucket_limits_warm_tokens(workload):
    w = workload(
        residency_capacity_tokens=16 * 60,
        top_k=4,
        tau=0.1,
        r_min=0.2,
        warmup_burst_tokens=ANCHOR_TOKENS * 1.5,
        warmup_tokens_per_s=ANCHOR_TOKENS / 2,
        warm_top_k=4,
    )
    now = fresh(w, star(w))
    w.policy.planner.bucket = ANCHOR_TOKENS * 1.5
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    assert len(w.policy.plan(now + 1.0)) == 1  # 1.5 anchors in the bucket
    w.step(0, "live", now + 1.5)
    assert w.policy.plan(now + 1.5) == []  # 0.75 anchors after +0.5 s
    w.step(0, "live", now + 2.0)
    assert len(w.policy.plan(now + 2.0)) == 1  # 1.0 after +1 s


def test_engine_queue_and_cooldown(workload):
    w = workload(residency_capacity_tokens=16 * 60, cooldown_s=10.0, max_engine_waiting=2, warm_max_waiting=2)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    assert w.policy.plan(now + 1.1, EngineLoad(inflight=3, waiting=5)) == []
    # a client request waiting: no warm queues in front of it (the slack rule); dirt is kept
    assert w.policy.plan(now + 1.15, EngineLoad(waiting=1)) == []
    w.policy.planner.dirty[("", "live")] = None
    first = w.policy.plan(now + 1.2, EngineLoad(waiting=0))  # dirt kept for a calmer tick
    assert len(first) == 1
    w.junk(16 * 80, now + 2)  # evicted again
    w.step(0, "live2", now + 3)
    assert w.policy.plan(now + 3.1) == []  # same anchor inside cool-down
    w.step(0, "live3", now + 12)
    assert [a.anchor_id for a in w.policy.plan(now + 12.1)] == [first[0].anchor_id]


def test_dedupe_across_sessions_in_one_tick(workload):
    w = workload(residency_capacity_tokens=16 * 60)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "a", now + 1)
    w.step(0, "b", now + 1)
    actions = w.policy.plan(now + 1.1)
    assert len(actions) == len({a.anchor_id for a in actions}) == 1


def test_tool_resume_keeps_a_paused_session_context_without_the_gate(workload):
    w = workload(residency_capacity_tokens=16 * 60)
    w.step(0, "s", 1.0, finish="tool_calls")  # nothing learned: gate shut
    assert not w.policy.stats().gate_open
    w.junk(16 * 80, 2.0)
    # no tool-gap sample yet: not while the traffic that evicted it may still be arriving ...
    assert w.policy.plan(2.5) == []
    actions = w.policy.plan(6.0)  # ... but once it paused for 2 mean inter-arrivals
    assert [(a.kind, a.reason) for a in actions] == [("warm", REASON_TOOL_RESUME)]
    a = actions[0]
    assert a.payload == ActionPayload({"session": "s"})
    assert a.block_hashes == tuple(w.anchor(0) + w.hist["s"])
    # a session that simply stopped gets nothing
    w2 = Workload(ScoutPolicy(quiet_config(residency_capacity_tokens=16 * 60)))
    w2.step(0, "s", 1.0, finish="stop")
    w2.junk(16 * 80, 2.0)
    assert w2.policy.plan(2.5) == []
    # tool_resume_gated puts it behind the (shut) gate
    w3 = Workload(ScoutPolicy(quiet_config(residency_capacity_tokens=16 * 60, tool_resume_gated=True)))
    w3.step(0, "s", 1.0, finish="tool_calls")
    w3.junk(16 * 80, 2.0)
    assert w3.policy.plan(2.5) == []


def test_sweep_emits_retain_hints_with_survival_priority(workload):
    w = workload(residency_capacity_tokens=16 * 1000, retain_enabled=True, sweep_interval_s=0.0)
    now = fresh(w, learn(w, PIPE, drain=False))
    actions = w.policy.plan(now + 0.1)
    retains = [a for a in actions if a.kind == "retain"]
    assert retains and all(a.reason == REASON_SWEEP for a in retains)
    by_payload = {a.payload.prompt["agent"]: a.priority for a in retains if "agent" in a.payload.prompt}
    # sessions sit on agent 2 (their last step): 2 is E=0, 0 is one hop, 1 two hops
    assert by_payload[2] > by_payload[0] > by_payload[1]
    assert w.policy.stats().inflight_actions == 0  # hints are fire-and-forget


# --- property: no sequence of events makes the planner break a budget or the cool-down ----------

events = st.lists(
    st.tuples(
        st.sampled_from(["req", "req", "req", "plan", "ok", "fail", "junk"]),
        st.integers(0, 5),
        st.integers(0, 3),
        st.floats(0.0, 0.7),
    ),
    min_size=5,
    max_size=120,
)


@settings(max_examples=60, deadline=None)
@given(events, st.integers(1, 3), st.integers(1, 3), st.sampled_from([0.0, 0.3, 0.9]))
def test_planner_never_breaks_budgets(evs, per_tick, concurrent, r_min):
    cfg = quiet_config(
        residency_capacity_tokens=16 * 40,
        max_actions_per_tick=per_tick,
        max_concurrent=concurrent,
        r_min=r_min,
        r_min_transitions=3,
        top_k=3,
        tau=0.05,
        warmup_burst_tokens=300.0,
        warmup_tokens_per_s=200.0,
        cooldown_s=1.0,
        action_ttl_s=0.5,
        sweep_interval_s=0.5,
        retain_enabled=True,
    )
    w = Workload(ScoutPolicy(cfg))
    now = 0.0
    open_actions = []
    spent = []  # (time, cost) of every warm/touch
    last = {}
    for kind, agent, session, dt in evs:
        now += dt
        if kind == "req":
            w.step(agent, f"s{session}", now, finish="tool_calls" if agent == 5 else "stop", dur=0.05)
        elif kind == "junk":
            w.junk(16 * 20, now)
        elif kind in ("ok", "fail") and open_actions:
            w.policy.record_action_result(open_actions.pop(0), kind == "ok", now)
        elif kind == "plan":
            gate = w.policy.stats().gate_open
            acts = w.policy.plan(now)
            assert len(acts) <= per_tick
            for a in acts:
                assert a.deadline == a.created + cfg.action_ttl_s
                assert a.anchor_id not in last or now - last[a.anchor_id] >= cfg.cooldown_s
                last[a.anchor_id] = now
                if not gate:  # a shut gate: session facts only (tool resumes; fan-out parents:
                    # siblings overlapping in time, here a request sent before the previous one's
                    # response ended)
                    assert a.reason in (REASON_TOOL_RESUME, REASON_FANOUT) and "session" in a.payload.prompt
                if a.kind != "retain":
                    open_actions.append(a)
                    spent.append(
                        (
                            now,
                            cfg.touch_cost_tokens
                            if a.kind == "touch"
                            else a.tokens
                            - w.policy.residency.resident_prefix_tokens(a.block_hashes, [BLOCK] * len(a.block_hashes)),
                        )
                    )
            live = [a for a in open_actions if a.deadline + cfg.action_ttl_s >= now]
            assert len(w.policy.planner.inflight) <= concurrent
            assert len(live) <= concurrent + per_tick
    total = sum(c for _, c in spent)
    assert total <= cfg.warmup_burst_tokens + cfg.warmup_tokens_per_s * now + 1e-6


def _paused_after_tool_calls(prefill_tokens_per_s):
    """Agent 0 ends with tool_calls and its session comes back 0.5 s later, every time."""
    w = Workload(
        ScoutPolicy(quiet_config(residency_capacity_tokens=16 * 60, prefill_tokens_per_s=prefill_tokens_per_s))
    )
    now = 0.0
    for s in range(8):
        for agent in (0, 1, 2):
            w.step(agent, f"l{s}", now, finish="tool_calls" if agent == 0 else "stop", dur=0.1)
            now += 0.6  # response at +0.1, next request at +0.6
    w.policy.plan(now + 100)
    now = fresh(w, now + 200)
    w.step(0, "live", now, finish="tool_calls", dur=0.1)  # paused at now+0.1, back ~now+0.6
    w.junk(16 * 80, now + 0.1)  # evicts its context and every anchor
    # a 0.5 s pause is shorter than the wake margin: no wake, the pause is warmed when planned
    return w, w.policy.plan(now + 0.11) + w.policy.plan(now + 0.58)


def test_min_lead_time_blocks_warms_that_cannot_finish_before_the_demand():
    w, fast = _paused_after_tool_calls(prefill_tokens_per_s=5000.0)  # 144 tokens: 29 ms < 0.49 s
    agent0 = w.policy.agents.tenant("").by_slot[0]
    assert list(agent0.tool_gaps) == [0.5] * 8
    assert sorted((a.kind, a.reason) for a in fast) == [("warm", REASON_TOOL_RESUME), ("warm", REASON_TRANSITION)]
    _, slow = _paused_after_tool_calls(prefill_tokens_per_s=100.0)  # 128 tokens: 1.3 s > 0.49 s
    assert slow == []


def test_executed_actions_are_attributed_to_the_request_they_prepared(workload):
    w = workload(residency_capacity_tokens=16 * 60)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    (warm,) = w.policy.plan(now + 1.1)
    assert w.step(1, "unrelated", now + 1.2).acted_reason is None  # not executed yet
    w.policy.record_action_result(warm, True, now + 1.3)
    obs = w.step(1, "live", now + 2)  # the predicted agent arrives
    assert (obs.acted_reason, obs.acted_tokens) == (REASON_TRANSITION, warm.tokens)
    assert w.step(1, "again", now + 3).acted_reason is None  # counted once


def test_plan_trigger_decides_when_successors_are_planned():
    from proxy.core import ResponseOutcome as RO

    for trigger, at_request, at_response in (("response", 0, 1), ("request", 1, 0), ("both", 0, 1)):
        w = Workload(ScoutPolicy(quiet_config(residency_capacity_tokens=16 * 60, plan_trigger=trigger)))
        now = fresh(w, learn(w, PIPE))
        w.junk(16 * 80, now)
        obs = w.policy.observe_request(w.view(0, "live"), now + 1)
        first = w.policy.plan(now + 1.01)
        w.policy.observe_response(obs.request_id, RO("stop"), now + 1.5)
        second = w.policy.plan(now + 1.51)
        # "both" plans while the request runs too, but only touches: the evicted anchor waits
        assert (len(first), len(second)) == (at_request, at_response), trigger
        assert all(a.kind == "warm" and a.payload == ActionPayload({"agent": 1}) for a in first + second)


def test_auto_trigger_acts_at_the_response_only_when_the_pause_leaves_time():
    from proxy.core import ResponseOutcome as RO

    def run(pause):
        w = Workload(ScoutPolicy(quiet_config(residency_capacity_tokens=16 * 60, plan_trigger="auto")))
        now = 0.0
        for s in range(4):
            for agent in PIPE:
                w.step(agent, f"l{s}", now, dur=0.1)
                now += 0.1 + pause
        w.policy.plan(now + 100)
        now = fresh(w, now + 200)
        w.junk(16 * 80, now)
        obs = w.policy.observe_request(w.view(0, "live"), now + 1)
        first = w.policy.plan(now + 1.01)
        w.policy.observe_response(obs.request_id, RO("stop"), now + 1.5)
        second = w.policy.plan(now + 1.51)
        return len(first), len(second)

    assert run(pause=1.0) == (0, 1)  # long pauses: warm just before the demand
    assert run(pause=0.005) == (1, 0)  # tight loop: warm while the request runs


def test_warm_max_inflight_keeps_warms_off_a_busy_engine(workload):
    w = workload(residency_capacity_tokens=16 * 60, warm_max_inflight=3)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    assert w.policy.plan(now + 1.1, EngineLoad(inflight=4)) == []
    w.step(0, "live", now + 2)
    assert [a.kind for a in w.policy.plan(now + 2.1, EngineLoad(inflight=3))] == ["warm"]


def test_sweep_leaves_sessions_paused_after_a_plain_stop(workload):
    """A session whose agent always comes back ~2 s after a plain stop (a user's turn, the next
    agent) is not swept, even at the LRU tail with the gate open to it: on the headroom grid those
    touches cost more than they kept (docs/results/replay-capture.md). The same session paused on a
    tool call is (until its agent's tool pauses are learned; then the wakes re-check it)."""

    def swept(finish: str, turns: int) -> list:
        w = workload(residency_capacity_tokens=16 * 60, sweep_interval_s=0.5, r_min=0.0, r_min_transitions=0)
        now = 0.0
        for _turn in range(turns):
            w.step(0, "chat", now, dur=0.5, finish=finish)
            now += 2.5  # resumes 2 s after each response
        end = now - 2.0  # the last response ended here
        w.policy.plan(end + 0.1)
        w.junk(16 * 47, end + 0.2)  # its context is now at the LRU tail
        return [(a.kind, a.reason) for a in w.policy.plan(end + 1.0) if "session" in a.payload.prompt]

    assert swept("stop", 5) == []  # 4 pauses of ~2 s learned: it would have been "likely to resume"
    assert swept("tool_calls", 2) == [("touch", REASON_TOOL_RESUME)]


def test_retain_hints_cover_anchors_not_paused_session_contexts(workload):
    """An engine keeps a retained block's priority for its retention time (minutes): contexts of
    sessions that may never resume must not get one unless asked (``retain_sessions``)."""

    def run(**kw):
        w = workload(residency_capacity_tokens=16 * 1000, retain_enabled=True, sweep_interval_s=0.0, **kw)
        now = fresh(w, learn(w, PIPE, drain=False))
        for _turn in range(3):  # a session that resumes 2 s after each tool call (2 pauses: swept)
            w.step(0, "chat", now, dur=0.5, finish="tool_calls")
            now += 2.0
        fresh(w, now)
        return w, w.policy.plan(now - 1.0)

    _w, acts = run()
    retains = [a for a in acts if a.kind == "retain"]
    assert retains and all("agent" in a.payload.prompt for a in retains)
    assert all(a.priority == 0 for a in acts if "session" in a.payload.prompt)


def test_session_context_actions_carry_an_engine_priority_only_with_retain_sessions(workload):
    def touched(**kw) -> list[int]:
        w = workload(residency_capacity_tokens=16 * 60, sweep_interval_s=0.5, retain_enabled=True, **kw)
        w.step(0, "s", 0.0, dur=0.5, finish="tool_calls")
        w.policy.plan(0.6)
        w.junk(16 * 47, 0.7)  # the paused context is now at the LRU tail
        return [a.priority for a in w.policy.plan(1.5) if "session" in a.payload.prompt]

    assert touched() == [0]
    assert touched(retain_sessions=True)[0] > 0


def test_auto_warm_budget_is_a_share_of_the_prefill_rate():
    cfg = quiet_config(prefill_tokens_per_s=3000.0, warmup_share=0.5)
    assert cfg.warm_budget() == (1500.0, 3000.0)
    assert quiet_config(warmup_tokens_per_s=100.0, warmup_burst_tokens=50.0).warm_budget() == (100.0, 50.0)
    p = ScoutPolicy(cfg).planner
    assert p.bucket == 3000.0


def test_no_warm_while_the_engine_queue_is_not_empty(workload):
    w = workload(residency_capacity_tokens=16 * 60)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    assert w.policy.plan(now + 1.2, EngineLoad(waiting=1)) == []
    w.step(0, "live2", now + 2)
    assert [a.kind for a in w.policy.plan(now + 2.1, EngineLoad(waiting=0))] == ["warm"]


def test_a_tool_pause_warm_waits_for_the_wake_before_the_resume(workload):
    """Paused on tool_calls, resuming ~5 s later, and the cache turns over in ~1 s: a warm now
    would be evicted again before the resume (P(resident at the demand) ~ e^-5), so none is made
    when the pause is planned; the pause's wake, just before the resume, warms it. (CI, stop 32:
    the e2e tool pause's warm was made 0.7 s into a 5 s pause, mid-burst, and the rest of the burst
    evicted 6 of its 38 blocks before the resume.)"""
    w = workload(residency_capacity_tokens=16 * 60)
    now = 0.0
    for _ in range(4):
        w.step(0, "s", now, finish="tool_calls", dur=0.5)
        now += 5.5
    for k in range(6):  # ~960 tokens/s of other traffic
        w.junk(16 * 60, now + k)
    w.step(0, "s", now + 6, finish="tool_calls", dur=0.5)  # paused at +6.5, back at ~+11.5
    w.junk(16 * 80, now + 6.6)
    assert w.policy.plan(now + 6.7) == []
    assert w.policy.planner.skipped["warm_not_allowed"] >= 1
    assert [(a.kind, a.reason) for a in w.policy.plan(now + 11.49)] == [("warm", REASON_TOOL_RESUME)]


def test_concurrent_requests_sharing_a_parent_protect_it_as_fanout(workload):
    """Two requests of one session in flight at once share a parent prefix beyond the anchor
    (parallel branches): the parent is touched when near eviction, reason fanout, without the gate."""
    from proxy.core import view_from_blocks

    w = workload(residency_capacity_tokens=16 * 100)
    pol = w.policy
    w.step(0, "s", 1.0, dur=0.1)  # anchor + 1 history block
    parent = w.anchor(0) + w.hist["s"]
    a = pol.observe_request(
        view_from_blocks("", parent + [7001], BLOCK, anchor_blocks=ANCHOR, session_id="s", context_payload="a"), 2.0
    )
    assert pol.plan(2.0) == [] and pol.fanouts == 0  # one branch: nothing
    pol.observe_request(
        view_from_blocks("", parent + [7002], BLOCK, anchor_blocks=ANCHOR, session_id="s", context_payload="b"), 2.1
    )
    assert pol.fanouts == 1
    w.junk(16 * 80, 2.2)  # the parent drifts to the LRU tail
    acts = pol.plan(2.3)
    assert [(x.kind, x.reason, x.block_hashes) for x in acts] == [("touch", REASON_FANOUT, tuple(parent))]
    assert not pol.stats().gate_open
    pol.observe_response(a.request_id, ResponseOutcome("stop"), 2.4)


def test_n_above_one_marks_the_prompt_as_a_fanout_parent(workload):
    from proxy.core import view_from_blocks, view_from_openai

    v = view_from_openai(
        "/v1/chat/completions",
        {
            "model": "m",
            "n": 3,
            "messages": [{"role": "system", "content": "x" * 200}, {"role": "user", "content": "hi"}],
        },
        {},
    )
    assert v is not None and v.n == 3

    def run(**kw):
        w = workload(residency_capacity_tokens=16 * 100, retain_enabled=True, **kw)
        ids = w.anchor(0) + [8001, 8002]
        w.policy.observe_request(view_from_blocks("", ids, BLOCK, anchor_blocks=ANCHOR, session_id="p", n=4), 1.0)
        return ids, w.policy.plan(1.1)

    ids, acts = run(retain_sessions=True)
    assert [(x.kind, x.reason, x.block_hashes) for x in acts] == [("retain", REASON_FANOUT, tuple(ids))]
    assert run()[1] == []  # resident and safe, no engine priority for one session's parent
    assert run(retain_sessions=True, fanout_enabled=False)[1] == []


def test_overflow_is_a_regime_observe_only_for_a_cache_lifetime_after_it(workload):
    """The running set alone overflowing the cache stops all actions, and keeps them stopped for one
    cache lifetime (capacity / insert rate) after it: a dip between two requests (a tool pause) is
    not slack, the next overflow evicts whatever is warmed in it."""
    cap = 16 * 60
    w = workload(residency_capacity_tokens=cap)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)  # flush everything
    res = w.policy.residency
    w.step(0, "live", now + 1)
    assert w.policy.plan(now + 1.1, EngineLoad(running_tokens=cap)) == []  # overflowing now
    life = cap / res.rates.insert_rate
    assert 0 < life < w.policy.config.continuation_horizon_s
    w.step(0, "live", now + 1.1 + 0.2 * life)
    assert w.policy.plan(now + 1.1 + 0.3 * life, EngineLoad(running_tokens=0)) == []  # the dip
    assert w.policy.planner.overflow_ticks == 2
    w.step(0, "live", now + 1.1 + 1.5 * life)
    warm = [a for a in w.policy.plan(now + 1.1 + 1.6 * life) if a.reason == REASON_TRANSITION]
    assert len(warm) == 1 and warm[0].kind == "warm"  # a lifetime later: acts again


def test_a_tool_pause_after_a_burst_is_warmed_before_the_resume(workload):
    """A session pauses on tool_calls; other agents' burst evicts its context, then all is quiet
    until the resume ~5 s later (the e2e's check 4). By the third pause the tool gap is known, and
    the warm must land in the quiet before the resume: the burst's turnover must not make it look
    doomed for the whole pause (the insert rate is read as of now)."""
    w = workload(residency_capacity_tokens=16 * 60, cooldown_s=0.0, sweep_interval_s=1.0)
    t, warmed = 0.0, []
    for rnd in range(3):
        w.step(0, "s", t, finish="tool_calls", dur=0.2)
        for k in range(3):  # ~2,900 tokens in 0.75 s: three times the 960-token cache
            w.policy.observe_request(w.view(10 + k, f"ev{rnd}{k}", new_blocks=60), t + 0.25 * (k + 1))
        resume = t + 5.2
        now = t + 1.0
        while now < resume:
            warmed += [(rnd, now) for a in w.policy.plan(now) if a.reason == REASON_TOOL_RESUME and a.kind == "warm"]
            now += 0.25
        t = resume
    assert any(rnd == 2 for rnd, _ in warmed), (warmed, {k: v for k, v in w.policy.planner.skipped.items() if v})


def test_slack_lane_still_waits_for_a_queued_engine(workload):
    """The engine keeps a lowest-priority warm behind every queued client request, but once admitted
    its prefill runs before later arrivals': acting while clients queue lost on the replay grid
    (docs/replay.md "Lanes on the grid"), so the lane waits for the queue like FCFS does."""
    w = workload(residency_capacity_tokens=16 * 60, max_engine_waiting=2, warm_max_waiting=0)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    for lane in (False, True):
        w.policy.planner.dirty[("", "live")] = None
        assert w.policy.plan(now + 1.1, EngineLoad(waiting=5, priority_lane=lane)) == []
    assert w.policy.planner.skipped["tick_engine_busy"] >= 2
    w.policy.planner.dirty[("", "live")] = None
    assert [a.kind for a in w.policy.plan(now + 1.2, EngineLoad(waiting=0, priority_lane=True))] == ["warm"]


def test_requests_the_proxy_did_not_send_stop_actions_without_the_lane(workload):
    w = workload(residency_capacity_tokens=16 * 60)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    assert w.policy.plan(now + 1.1, EngineLoad(external=2)) == []
    assert w.policy.planner.skipped["tick_engine_shared"] == 1
    w.policy.planner.dirty[("", "live")] = None  # dirt is kept for a calmer tick
    assert [a.kind for a in w.policy.plan(now + 1.2, EngineLoad(external=2, priority_lane=True))] == ["warm"]
