"""The `demo-app` preset (the live demo's app in the replay's terms) and the grid `demo` whose two
cells match the demo's scenes (issue 25; docs/demo.md "The matching replay cells")."""

import itertools
import json
import statistics
from collections import defaultdict

import pytest

from proxy.demo.scenes import AGENTS_AT_WORK, APP, SATURATED
from proxy.replay.grid import GRIDS, spec_for
from proxy.replay.workloads import PRESETS, generate, preset
from proxy.replay.workloads_demo import agent_tool_base


def sessions_of(reqs):
    out = defaultdict(list)
    for r in reqs:
        out[r.session_id].append(r)
    return out


@pytest.mark.parametrize("seed", [0, 3])
def test_demo_app_is_two_tool_calls_then_an_answer(seed):
    spec = preset("demo-app", seed=seed)
    reqs = generate(spec)
    sess = sessions_of(reqs)
    assert len(sess) == APP.sessions == 24 and len(reqs) == 3 * 24
    for rs in sess.values():
        assert [r.finish_reason for r in rs] == ["tool_calls", "tool_calls", "stop"]
        assert len({r.agent for r in rs}) == 1  # one task, one agent
        for a, b in itertools.pairwise(rs):
            # the resume extends the paused prompt (same chain), by the call and its result
            assert b.block_hashes[: len(a.block_hashes) - 1] == a.block_hashes[: len(a.block_hashes) - 1]
            assert 30 + 115 <= b.prompt_tokens - a.prompt_tokens <= 30 + 275
            assert b.t - a.t >= a.tool_seconds
        assert rs[-1].output_tokens <= 12 and rs[0].output_tokens == 30
        assert rs[0].prompt_tokens >= 578 // 16 * 16 + 210
    starts = [rs[0].t for rs in sess.values()]
    assert max(starts) - min(starts) <= APP.start_spread_s  # one burst, as the demo starts them
    anchors = {r.agent: r.anchor_blocks * 16 for r in reqs}
    assert len(anchors) >= 4 and all(560 <= a <= 640 for a in anchors.values())


def test_each_agent_has_its_characteristic_tool_time():
    spec = preset("demo-app", seed=1)
    by_agent = defaultdict(list)
    for r in generate(spec):
        if r.tool_seconds is not None:
            by_agent[int(r.agent.removeprefix("agent"))].append(r.tool_seconds)
    bases = {a: agent_tool_base(spec, a) for a in range(spec.agents)}
    assert all(5.0 <= b <= 12.0 for b in bases.values())
    assert max(bases.values()) / min(bases.values()) > 1.2  # spread across agents, not one time
    for a, times in by_agent.items():
        assert all(0.75 * bases[a] - 1e-9 <= x <= 1.25 * bases[a] + 1e-9 for x in times)
    # the other presets' tool fields are untouched by the new ones
    assert PRESETS["gaia"].tool_rounds == 0 and PRESETS["gaia"].start_spread_s == 0.0


def test_demo_grid_cells_are_the_scenes():
    g = GRIDS["demo"]
    work, sat = g.presets
    assert work.capacity_blocks == (AGENTS_AT_WORK.cache_blocks,) and work.prefill_tps == AGENTS_AT_WORK.prefill_tps
    assert sat.capacity_blocks == (SATURATED.cache_blocks,) and sat.prefill_tps == SATURATED.prefill_tps
    assert work.sessions == AGENTS_AT_WORK.spec.sessions and sat.sessions == SATURATED.spec.sessions
    s2 = spec_for(sat, "own", 1.1, 0)
    assert s2.tool_seconds == SATURATED.spec.tool_seconds and s2.pause_mix == () and s2.prefill_tokens_per_s == 4000.0
    # busy at a perfect cache sets the burst's start window; more busy, a shorter window
    spans = [max(r.t for r in generate(spec_for(work, "own", b, 0))) for b in work.busy]
    assert spans == sorted(spans, reverse=True)


def test_demo_grid_runs_and_keeps_the_signs(tmp_path):
    from proxy import cli

    out = tmp_path / "g"
    rc = cli.main(["replay", "--grid", "demo", "--out", str(out), "--jobs", "1", "--no-progress", "--no-plots"])
    assert rc == 0
    cells = json.loads((out / "report.json").read_text())["results"]["grid"]
    assert len(cells) == 4
    scene1 = next(c for c in cells if c["params"]["preset"] == "demo-agents-at-work" and c["params"]["busy"] == 0.22)
    scene2 = next(c for c in cells if c["params"]["preset"] == "demo-saturated")
    m1, m2 = scene1["params"]["measured"], scene2["params"]["measured"]
    assert m1["capacity_over_running_set"] > 2 and m2["capacity_over_running_set"] < 1  # holds / overflowed
    assert m1["sessions_tool_idle_mean"] > 8  # many sessions paused on tools
    p1, p2 = scene1["policies"], scene2["policies"]
    lru1 = p1["lru"]["ttft_mean_s"]
    assert p1["oracle-keeper"]["ttft_mean_s"] < 0.85 * lru1  # the headroom the demo's ceiling run shows
    assert p1["scout-proxy"]["ttft_mean_s"] <= lru1 and p1["scout-proxy"]["hit_rate"] >= p1["lru"]["hit_rate"]
    assert p2["lru"]["ttft_mean_s"] > 1.0  # overloaded: TTFT in seconds, as the demo's direct run
    assert (
        not p2["scout-proxy"]["extra"]["actions_emitted"]
        and p2["scout-proxy"]["ttft_mean_s"] == p2["lru"]["ttft_mean_s"]
    )
    assert statistics.mean(c["params"]["measured"]["busy_offered"] for c in cells[:3]) < 0.3


def test_default_and_quick_grids_unchanged():
    assert [p.name for p in GRIDS["default"].presets] == ["coding-agent", "chat-agents", "swebench", "gaia"]
    # (the quick grid's results and the presets' streams are checked bit-identical in test_grid.py)
    assert all(
        not p.workload and not p.capacity_blocks and not p.busy for g in ("default", "quick") for p in GRIDS[g].presets
    )
