"""Workload generators: seeded, shaped like the paper's workloads, append-only per (agent, session)."""

import itertools
from dataclasses import replace

import pytest

from proxy.cachemodel.cost_model import CostModel
from proxy.replay.workloads import PAPER_PRESETS, PRESETS, WorkloadSpec, anchor_share, describe, generate, preset


@pytest.fixture(scope="module")
def streams():
    return {name: generate(replace(spec, sessions=min(spec.sessions, 24))) for name, spec in PRESETS.items()}


def test_same_seed_same_stream_other_seed_differs():
    a = generate(preset("selector", sessions=8))
    b = generate(preset("selector", sessions=8))
    c = generate(preset("selector", sessions=8, seed=1))
    assert a == b
    assert [r.block_hashes for r in a] != [r.block_hashes for r in c]


@pytest.mark.parametrize("name", sorted(PAPER_PRESETS))  # the regime presets are not the paper's
def test_anchor_share_is_in_the_papers_range(streams, name):
    assert 0.53 <= anchor_share(streams[name]) <= 0.62


def test_stream_is_time_ordered_and_every_request_names_its_agent(streams):
    for reqs in streams.values():
        assert all(a.t <= b.t for a, b in itertools.pairwise(reqs))
        assert all(r.agent and r.session_id and 0 < r.anchor_blocks < len(r.block_hashes) for r in reqs)


def test_histories_are_append_only_per_agent_and_session(streams):
    last = {}
    for r in streams["gaia"]:
        key = (r.agent, r.session_id)
        prev = last.get(key)
        if prev is not None:
            full = len(prev.block_hashes) - (1 if prev.block_tokens[-1] < 16 else 0)
            assert r.block_hashes[:full] == prev.block_hashes[:full]
            assert r.prompt_tokens > prev.prompt_tokens
        last[key] = r


def test_agents_share_anchor_blocks_across_sessions(streams):
    anchors = {}
    for r in streams["selector"]:
        anchors.setdefault(r.agent, set()).add(r.block_hashes[: r.anchor_blocks])
    assert len(anchors) == 6 and all(len(v) == 1 for v in anchors.values())


def test_pipeline_follows_the_fixed_order_and_random_does_not():
    def successors(reqs):
        seen = {}
        order = {}
        for r in reqs:
            prev = order.get(r.session_id)
            if prev is not None:
                seen.setdefault(prev, set()).add(r.agent)
            order[r.session_id] = r.agent
        return seen

    pipe = successors(generate(preset("pipeline", sessions=12)))
    assert all(len(v) == 1 for v in pipe.values())
    rnd = successors(generate(preset("random", sessions=12)))
    assert max(len(v) for v in rnd.values()) >= 4


def test_tool_presets_pause_on_tool_calls_and_resume_after_the_tool(streams):
    reqs = streams["gaia"]
    by_session = {}
    for r in reqs:
        by_session.setdefault(r.session_id, []).append(r)
    pauses = 0
    for sess in by_session.values():
        for a, b in itertools.pairwise(sess):
            if a.finish_reason == "tool_calls":
                pauses += 1
                assert b.agent == a.agent and b.t - a.t >= a.tool_seconds
                assert 0.5 <= a.tool_seconds <= 8.0
    assert pauses > 10
    assert describe(PRESETS["gaia"], reqs)["tool_calls"] == pauses


def test_selector_presets_call_the_supervisor_every_step(streams):
    cats = {r.category for r in streams["gsm8k"]}
    assert cats == {"selector", "agent"}


def test_target_load_sets_the_arrival_rate():
    cost = CostModel()
    for load in (0.4, 0.8):
        reqs = generate(preset("selector", sessions=32, load=load))
        cold = sum(cost.prefill_s(r.prompt_tokens) for r in reqs)
        span = reqs[-1].t - reqs[0].t
        assert 0.6 * load <= cold / span <= 1.4 * load


def test_unknown_topology_and_preset_are_rejected():
    with pytest.raises(ValueError):
        generate(WorkloadSpec(topology="star"))
    with pytest.raises(KeyError):
        preset("nope")


def test_fanout_preset_forks_turns_into_concurrent_branches_on_one_parent(streams):
    spec = PRESETS["fanout"]
    branches = [r for r in streams["fanout"] if r.category == "branch"]
    assert branches
    by_session: dict = {}
    for r in branches:
        by_session.setdefault(r.session_id, []).append(r)
    checked = 0
    for rs in by_session.values():
        rs.sort(key=lambda r: r.t)
        for k in range(0, len(rs) - spec.fanout + 1, spec.fanout):
            g = rs[k : k + spec.fanout]
            # siblings start within the stagger window, share anchor + history, differ at the end
            assert g[-1].t - g[0].t <= spec.fanout_stagger_s * (spec.fanout - 1) + 1e-6
            n = min(len(r.block_hashes) for r in g)
            common = 0
            while common < n and len({r.block_hashes[common] for r in g}) == 1:
                common += 1
            assert common > g[0].anchor_blocks
            assert len({r.block_hashes[-1] for r in g}) == spec.fanout
            checked += 1
    assert checked >= 10
