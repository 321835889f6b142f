"""Snapshot round-trip, versioning and size; facade behaviour end to end."""

from __future__ import annotations

import copy
import json
import random

import pytest

from proxy.core import PolicyConfig, ResponseOutcome, ScoutPolicy, view_from_blocks, view_from_openai
from proxy.core.action_payload import ActionPayload

from .conftest import Workload, quiet_config


def learned_policy(n_agents=6, steps=400, seed=0, cfg=None):
    w = Workload(ScoutPolicy(cfg or PolicyConfig()))
    rng = random.Random(seed)
    agent, now = 0, 0.0
    for k in range(steps):
        now += 1.0
        w.step(agent, f"s{k // 20}", now, finish="tool_calls" if rng.random() < 0.3 else "stop")
        agent = (agent + 1) % n_agents if rng.random() < 0.8 else rng.randrange(n_agents)
    return w, now


def test_snapshot_round_trip_preserves_what_was_learned():
    w, _now = learned_policy()
    p = w.policy
    snap = p.snapshot()
    assert snap["kind"] == "cachescout-policy" and snap["version"] == 3
    text = json.dumps(snap)  # JSON-safe
    q = ScoutPolicy()
    q.restore(json.loads(text))
    a, b = p.stats(), q.stats()
    assert (b.agents, b.transitions, b.predictions, b.prediction_hits) == (
        a.agents,
        a.transitions,
        a.predictions,
        a.prediction_hits,
    )
    assert b.predictability == pytest.approx(a.predictability, abs=0.01)
    ta, tb = p.agents.tenant(""), q.agents.tenant("")
    for slot, agent in ta.by_slot.items():
        other = tb.by_slot[slot]
        assert other.agent_id == agent.agent_id and other.key == agent.key and other.uses == agent.uses
        assert list(other.gaps) == pytest.approx(list(agent.gaps), rel=1e-3)
        assert [s for s, _ in tb.learner.successors(slot, 3, 0.1)] == [
            s for s, _ in ta.learner.successors(slot, 3, 0.1)
        ]
    assert q.snapshot() == snap  # idempotent


def test_restored_policy_keeps_predicting_and_refills_anchors_on_sight():
    cfg = quiet_config(residency_capacity_tokens=16 * 60)
    w, now = learned_policy(cfg=cfg)
    q = ScoutPolicy(cfg)
    q.restore(w.policy.snapshot())
    w2 = Workload(q)
    for agent in range(6):  # anchors/payloads come back on sight
        w2.step(agent, "warmup-run", now + agent)
    obs = w2.step(0, "x", now + 10)
    assert obs.agent_id == w.policy.agents.tenant("").by_slot[0].agent_id
    w2.junk(16 * 80, now + 11)
    w2.step(0, "y", now + 12)
    actions = q.plan(now + 12.1)
    assert any(a.kind == "warm" and a.payload == ActionPayload({"agent": 1}) for a in actions)


def test_restore_rejects_foreign_old_and_oversized_documents():
    w, _ = learned_policy(steps=50)
    snap = w.policy.snapshot()
    q = ScoutPolicy()
    for bad in ({"kind": "other", "version": 1}, {**snap, "version": 1}, {**snap, "version": 4}, [], None):
        with pytest.raises(ValueError):
            q.restore(bad)
    small = ScoutPolicy(PolicyConfig(snapshot_max_bytes=200))
    with pytest.raises(ValueError, match="bytes"):
        small.restore(copy.deepcopy(snap))
    assert q.stats().agents == 0  # failed restores change nothing


def test_snapshot_of_24_agents_is_under_25_kb():
    w, _ = learned_policy(n_agents=24, steps=3000, seed=3)
    # make the chain dense: every agent reached every other at least once
    now = 4000.0
    for a in range(24):
        for b in range(24):
            now += 1
            w.step(a, f"d{a}-{b}", now)
            w.step(b, f"d{a}-{b}", now + 0.5)
    snap = w.policy.snapshot()
    assert w.policy.stats().agents == 24
    assert len(snap["tenants"][""]["transitions"]) >= 24 * 20
    assert len(json.dumps(snap, separators=(",", ":"))) <= 25_000


def test_snapshot_contains_no_prompt_text():
    p = ScoutPolicy()
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "TOP-SECRET system prompt " * 5},
            {"role": "user", "content": "PRIVATE question"},
        ],
    }
    p.observe_request(view_from_openai("/v1/chat/completions", body, {"x-session-id": "s"}), 0.0)
    text = json.dumps(p.snapshot())
    assert "SECRET" not in text and "PRIVATE" not in text


def test_predicted_flag_and_stats_track_top1_accuracy():
    w = Workload(ScoutPolicy())
    now = 0.0
    flags = []
    for k in range(30):
        now += 1
        flags.append(w.step(k % 3, "s", now).predicted)
    assert flags[:2] == [None, None] and all(flags[4:])
    st = w.policy.stats()
    assert st.top1_accuracy == pytest.approx(st.prediction_hits / st.predictions) and st.top1_accuracy > 0.9
    assert st.agents == 3 and st.sessions == 1 and st.transitions == 29


def test_unknown_response_ids_and_empty_views_are_ignored():
    p = ScoutPolicy()
    p.observe_response(12345, ResponseOutcome("stop"), 0.0)
    obs = p.observe_request(view_from_blocks("", [], []), 0.0)
    assert obs.agent_id is None and p.stats().agents == 0
    assert p.plan(1.0) == []


def test_config_overrides_reject_typos():
    assert PolicyConfig().with_overrides(r_min=0.5).r_min == 0.5
    with pytest.raises(TypeError):
        PolicyConfig().with_overrides(rmin=0.5)


def test_engine_truth_swaps_one_config_into_policy_and_planner():
    """Measured engine facts replace config fields in the facade and the planner at once (no
    caller pokes planner.cfg), and a host tier appears when its size is given."""
    pol = ScoutPolicy()
    cfg = pol.engine_truth(prefill_tokens_per_s=1234.0)
    assert pol.config is cfg and pol.planner.cfg is cfg and cfg.prefill_tokens_per_s == 1234.0
    assert pol.host_residency is None
    pol.engine_truth(host_tier_tokens=4096, reload_tokens_per_s=50_000.0)
    assert pol.host_residency is not None and pol.planner.cfg.host_tier_tokens == 4096
