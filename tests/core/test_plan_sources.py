"""The candidate sources (plan_sources.py): each offers its own candidates, and switched off
(``disabled_pieces``) offers none while the others still do."""

from __future__ import annotations

from proxy.core import ScoutPolicy
from proxy.core.actions import (
    REASON_FANOUT,
    REASON_SUCCESSOR_CONTEXT,
    REASON_SWEEP,
    REASON_TOOL_RESUME,
    REASON_TRANSITION,
)
from proxy.core.candidates import Candidate

from .conftest import ANCHOR, Workload, quiet_config
from .test_planner import PIPE, fresh, learn


def _w(**kw) -> Workload:
    return Workload(ScoutPolicy(quiet_config(**kw)))


def test_candidate_is_keyword_only():
    import pytest

    with pytest.raises(TypeError):
        Candidate(1.0, "transition", "", "a", (1,), (16,), None, 1.0, None)  # type: ignore[misc,arg-type]


def _successor_warm(**kw) -> list[str]:
    w = _w(residency_capacity_tokens=16 * 60, **kw)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    return [a.reason for a in w.policy.plan(now + 1.2)]


def test_successors_offer_the_predicted_next_agent():
    assert _successor_warm() == [REASON_TRANSITION]
    assert _successor_warm(disabled_pieces=("successors",)) == []
    assert _successor_warm(disabled_pieces=("tool_resume",)) == [REASON_TRANSITION]  # another source


def _tool_resume(**kw) -> list[str]:
    w = _w(residency_capacity_tokens=16 * 60, **kw)
    w.step(0, "s", 1.0, finish="tool_calls")
    w.junk(16 * 80, 2.0)
    w.policy.plan(2.5)
    return [a.reason for a in w.policy.plan(6.0)]


def test_tool_resume_offers_a_tool_paused_session_context():
    assert _tool_resume() == [REASON_TOOL_RESUME]
    assert _tool_resume(disabled_pieces=("tool_resume",)) == []


def _sweep(**kw) -> set[str]:
    w = _w(residency_capacity_tokens=16 * 1000, retain_enabled=True, sweep_interval_s=0.0, **kw)
    now = fresh(w, learn(w, PIPE, drain=False))
    return {a.reason for a in w.policy.plan(now + 0.1) if a.kind == "retain"}


def test_anchor_sweep_offers_the_survival_ranked_anchors():
    assert _sweep() == {REASON_SWEEP}
    assert _sweep(disabled_pieces=("anchor_sweep",)) == set()


def test_session_sweep_offers_paused_sessions_likely_to_resume():
    w = _w(residency_capacity_tokens=16 * 60, sweep_interval_s=0.0)
    w.step(0, "s", 1.0, finish="tool_calls")
    w.policy.planner.dirty.clear()  # only the sweep may see it
    w.junk(16 * 80, 2.0)
    assert [a.reason for a in w.policy.plan(6.0)] == [REASON_TOOL_RESUME]
    w = _w(residency_capacity_tokens=16 * 60, sweep_interval_s=0.0, disabled_pieces=("session_sweep",))
    w.step(0, "s", 1.0, finish="tool_calls")
    w.policy.planner.dirty.clear()
    w.junk(16 * 80, 2.0)
    assert w.policy.plan(6.0) == []


def _fanout(**kw) -> list[str]:
    from proxy.core import view_from_blocks

    from .conftest import ANCHOR, BLOCK

    w = _w(residency_capacity_tokens=16 * 100, **kw)
    pol = w.policy
    w.step(0, "s", 1.0, dur=0.1)
    parent = w.anchor(0) + w.hist["s"]
    for t, tail in ((2.0, 7001), (2.1, 7002)):
        v = view_from_blocks("", [*parent, tail], BLOCK, anchor_blocks=ANCHOR, session_id="s", context_payload="x")
        pol.observe_request(v, t)
        if t == 2.0:
            pol.plan(2.0)
    w.junk(16 * 80, 2.2)
    return [a.reason for a in pol.plan(2.3)]


def test_fanout_parents_offer_the_shared_parent():
    assert _fanout() == [REASON_FANOUT]
    assert _fanout(disabled_pieces=("fanout_parents",)) == []


def _hinted(**kw) -> list[str]:
    from proxy.core.hint_actions import Hint, HintDriver

    from .test_runtime_hints import evict_all, paused

    w = _w(residency_capacity_tokens=16 * 40, **kw)
    d = HintDriver(w.policy)
    paused(w, "s1", 1.0)  # finish "stop": no tool_resume of its own; nothing learned: gate shut
    evict_all(w, 1.5)
    assert not w.policy.plan(2.0)
    d.submit([Hint("tool_started", "s1")], "rt", 2.0)
    assert w.policy.planner.hints is d  # the driver attached itself: a source that gets agents and sessions
    return [a.reason for a in w.policy.plan(2.1)]


def test_runtime_hints_offer_what_the_runtime_announced():
    assert _hinted() == [REASON_TOOL_RESUME]
    assert _hinted(disabled_pieces=("runtime_hints",)) == []


def _successor_contexts(**kw) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
    """Agent 1 spoke in session "live" before 2 and 0; 0 stops: 1 is predicted next (PIPE).
    Returns the transition warms' prefixes and agent 1's prompt in "live"."""
    w = _w(residency_capacity_tokens=16 * 60, **kw)
    now = fresh(w, learn(w, PIPE))
    w.step(1, "live", now + 1)
    w.step(2, "live", now + 2)
    w.step(0, "live", now + 3)
    w.junk(16 * 80, now + 3.15)  # flush everything
    w.policy.planner.dirty[("", "live")] = None  # (junk is warmup-flagged: nothing else changed)
    acts = [a for a in w.policy.plan(now + 3.2) if a.reason in (REASON_TRANSITION, REASON_SUCCESSOR_CONTEXT)]
    assert all(a.kind == "warm" and (a.reason == REASON_TRANSITION) == (len(a.block_hashes) == ANCHOR) for a in acts)
    return [a.block_hashes for a in acts], (*w.anchor(1), w.hist["live"][0])


def test_successor_contexts_offer_the_next_agents_context_in_the_session():
    anchor = tuple(_w().anchor(1))
    off, ctx = _successor_contexts()
    assert off == [anchor] and ctx[:-1] == anchor  # off by default: the anchor only (Successors)
    on, ctx = _successor_contexts(successor_contexts=2)
    assert sorted(on) == sorted([anchor, ctx])  # and agent 1's context in the session
    assert _successor_contexts(successor_contexts=2, disabled_pieces=("successor_contexts",))[0] == [anchor]


def test_successor_contexts_are_kept_per_agent_bounded_and_charged():
    w = _w(successor_contexts=1)
    for k, agent in enumerate((0, 1, 2)):
        w.step(agent, "s", 1.0 + k)
    tracker = w.policy.sessions
    s = tracker.sessions[("", "s")]
    assert s.contexts is not None
    (kept,) = s.contexts.values()  # bounded at 1: agent 1's, the latest before 2
    assert kept.hashes[: len(w.anchor(1))] == tuple(w.anchor(1))
    assert s.ctx_bytes == kept.nbytes > 0 and s.nbytes >= kept.nbytes + len(s.hashes) * 56
    w.step(1, "s", 5.0)  # 1 speaks again: the session holds it now, 2's context is kept instead
    (kept,) = s.contexts.values()
    assert kept.hashes[: len(w.anchor(2))] == tuple(w.anchor(2))
    off = _w()
    off.step(0, "s", 1.0)
    off.step(1, "s", 2.0)
    assert off.policy.sessions.sessions[("", "s")].contexts is None  # nothing kept while off


def test_a_successor_context_action_converts_on_the_agents_next_request():
    w = _w(residency_capacity_tokens=16 * 60, successor_contexts=2)
    now = fresh(w, learn(w, PIPE))
    w.step(1, "live", now + 1)
    w.step(2, "live", now + 2)
    w.step(0, "live", now + 3)
    w.junk(16 * 80, now + 3.15)
    w.policy.planner.dirty[("", "live")] = None
    acts = [a for a in w.policy.plan(now + 3.2) if a.reason == REASON_SUCCESSOR_CONTEXT]
    assert len(acts) == 1
    for a in w.policy.plan(now + 3.2) + acts:
        w.policy.record_action_result(a, True, now + 3.3)
    obs = w.policy.observe_request(w.view(1, "live"), now + 3.5)  # agent 1 is next, as predicted
    assert obs.acted_reason == REASON_SUCCESSOR_CONTEXT and obs.acted_hash == acts[0].block_hashes[-1]


def _paused_near_eviction(load):
    """A tool-paused session's context, resident but near eviction (a touch, when calm), swept
    under ``load``."""
    from proxy.core.view import EngineLoad

    w = _w(residency_capacity_tokens=16 * 60, sweep_interval_s=0.0)
    w.step(0, "s", 1.0, finish="tool_calls")
    w.policy.planner.dirty.clear()  # only the sweep may see it
    w.junk(16 * 44, 2.0)
    acts = w.policy.plan(6.0, EngineLoad(**load))
    return [(a.kind, a.reason) for a in acts], w.policy.planner.skipped["wait_for_slack"]


def test_session_sweep_waits_while_the_engine_prefills_for_clients():
    """issue 21: on an FCFS engine a paused context's touch often re-prefills its evicted tail
    (the shadow is coarse there) and delays the client prefill running and every arrival behind it."""
    assert _paused_near_eviction({}) == ([("touch", REASON_TOOL_RESUME)], 0)
    assert _paused_near_eviction({"inflight": 1, "prefilling": 1}) == ([], 1)
    assert _paused_near_eviction({"inflight": 2, "waiting": 1}) == ([], 1)
    # decoding clients only: calm; a queued client is a reason to wait in the slack lane too
    assert _paused_near_eviction({"inflight": 3}) == ([("touch", REASON_TOOL_RESUME)], 0)
    assert _paused_near_eviction({"inflight": 2, "waiting": 1, "priority_lane": True}) == ([], 1)


def _woken(past_agent: int = 0, **kw) -> list[tuple[str, str]]:
    """A session paused on a tool call whose context is evicted during the tool's run (the pause
    is planned when it starts, when the context is still resident); only the tool resume's wakes
    may see it again (the session sweep is off)."""
    kw.setdefault("disabled_pieces", ("session_sweep",))
    w = _w(residency_capacity_tokens=16 * 60, **kw)
    for k in range(3):  # the agent's tool pauses: 3.6, 4.0 and 4.4 s
        w.step(past_agent, f"past{k}", 1.0 + k, finish="tool_calls")
        w.step(past_agent, f"past{k}", 4.7 + 1.4 * k)
    w.step(0, "s", 10.0, finish="tool_calls")
    assert w.policy.plan(10.2) == []  # resident when the pause starts
    w.junk(16 * 80, 11.0)  # the tool runs; other traffic evicts the context
    acts = []
    for k in range(40):
        acts += w.policy.plan(11.1 + k * 0.1)
    return [(a.kind, a.reason) for a in acts]


def test_tool_resume_wakes_before_the_learned_pause_ends():
    assert _woken() == [("warm", REASON_TOOL_RESUME)]
    assert _woken(resume_wake_quantiles=()) == []
    # an agent with too few pauses of its own goes by its tenant's other agents' pauses
    assert _woken(past_agent=1) == [("warm", REASON_TOOL_RESUME)]
    assert _woken(disabled_pieces=("session_sweep", "tool_resume")) == []


def _swept_with_pauses_learned(**kw) -> list[str]:
    w = _w(residency_capacity_tokens=16 * 60, sweep_interval_s=0.0, **kw)
    for k in range(3):
        w.step(1, f"past{k}", 1.0 + k, finish="tool_calls")
        w.step(1, f"past{k}", 4.7 + 1.4 * k)
    w.step(0, "s", 10.0, finish="tool_calls")
    w.policy.planner.dirty.clear()  # only the sweep may see it
    w.junk(16 * 80, 11.0)
    return [a.reason for a in w.policy.plan(15.0)]


def test_session_sweep_leaves_tool_pauses_to_the_wakes_once_pauses_are_learned():
    """With tool pauses learned the tool resume's wakes re-check a tool-paused session, so the
    sweep skips it (its re-checks, on every sweep, were the grid's harm); before that, and with
    the wakes off, the sweep keeps it."""
    assert _swept_with_pauses_learned() == []
    assert _swept_with_pauses_learned(resume_wake_quantiles=()) == [REASON_TOOL_RESUME]


def test_session_sweep_warms_a_tool_pause_when_its_next_sweep_would_be_too_late():
    """Two tool pauses of ~5 s learned (too few for wakes): a sweep early in the third pause
    leaves the evicted context for a later sweep, which still lands the warm before the resume
    (plan_sources.sweep_in_time); the last sweep in time warms it."""
    w = _w(residency_capacity_tokens=16 * 60, sweep_interval_s=1.0)
    now = 0.0
    for _ in range(3):
        w.step(0, "s", now, finish="tool_calls", dur=0.5)
        now += 5.5
    w.policy.planner.dirty.clear()  # only the sweep may see it
    w.junk(16 * 80, now - 4.9)  # paused at now - 5.0, back at ~now; the context is evicted
    assert w.policy.plan(now - 3.5) == []  # 3.5 s to go: the next sweep is in time
    assert w.policy.planner.skipped["warm_not_allowed"] >= 1
    assert [(a.kind, a.reason) for a in w.policy.plan(now - 1.9)] == [("warm", REASON_TOOL_RESUME)]
