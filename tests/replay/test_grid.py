"""The headroom grid (issue 21 items 3–4): regimes as workload parameters, the new presets, the
grid's JSON shape, and that the pre-existing presets still generate bit-identical streams."""

import hashlib
import itertools
import json
import statistics
from dataclasses import replace

import pytest

from proxy.replay import regimes
from proxy.replay.grid import GRIDS, GridPreset, GridSpec, crossing, run_grid, spec_for
from proxy.replay.runner import BLIND_POLICIES, POLICIES, SESSION_POLICIES
from proxy.replay.workloads import PAPER_PRESETS, PRESETS, generate, preset


def checksum(reqs) -> str:
    h = hashlib.sha256()
    for r in reqs:
        h.update(
            repr(
                (
                    r.t,
                    r.block_hashes,
                    r.block_tokens,
                    r.output_tokens,
                    r.session_id,
                    r.agent,
                    r.category,
                    r.anchor_blocks,
                    r.finish_reason,
                    r.tool_seconds,
                )
            ).encode()
        )
    return h.hexdigest()[:16]


# generate() of every preset that existed before the regime parameters, taken on main at b9e7d75
# (12 sessions; then seed 3 with load=None, the concurrency path)
BEFORE = {
    "debate": ("d83c84ceb42a9821", "ed3942c4f1a563e3"),
    "fanout": ("e8248da53667a2e6", "f4ab38825e03e13f"),
    "gaia": ("825abc80e61b09e6", "e90fce1e73c19b0f"),
    "gsm8k": ("396d3201ece2bd0c", "ebad0e9f74cb7c01"),
    "mtbench": ("2ef182459de705be", "c17e32a22b069b50"),
    "pipeline": ("e00e9dcb251b8d41", "a9c03e04c8d23604"),
    "random": ("23c454097052879f", "f191e80ee5aea2d5"),
    "selector": ("39fedce0350c5825", "52a2e6902c45f2f5"),
    "swebench": ("7d350659aacbf0ad", "9f6dcaec25ea3fbe"),
}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_existing_presets_are_bit_identical(name):
    assert set(BEFORE) == set(PAPER_PRESETS)
    a = checksum(generate(preset(name, sessions=12)))
    b = checksum(generate(preset(name, sessions=12, seed=3, load=None)))
    assert (a, b) == BEFORE[name]


def test_coding_agent_contexts_are_10k_to_60k_tokens_with_tool_pauses():
    reqs = generate(preset("coding-agent", sessions=6))
    prompts = [r.prompt_tokens for r in reqs]
    assert min(prompts) >= 10_000 and max(prompts) <= 60_000
    assert max(prompts) >= 30_000  # contexts do grow long, not just start long
    assert len({r.agent for r in reqs}) == 1
    tools = [r.tool_seconds for r in reqs if r.finish_reason == "tool_calls"]
    assert len(tools) >= len(reqs) // 3
    # calibrated on router#285: most pauses are sub-second, a tail runs long
    assert 0.7 <= sum(t <= 1.0 for t in tools) / len(tools) <= 0.97
    assert max(tools) > 10.0


def test_chat_agents_are_many_short_sessions_on_many_small_agents():
    reqs = generate(preset("chat-agents"))
    by_session = {}
    for r in reqs:
        by_session.setdefault(r.session_id, []).append(r)
    assert len(by_session) == 160
    assert all(len({r.agent for r in s}) == 1 for s in by_session.values())  # one assistant per chat
    assert len({r.agent for r in reqs}) >= 20
    assert max(len(s) for s in by_session.values()) <= 6
    assert max(r.prompt_tokens for r in reqs) < 4_000
    # human think time between turns: seconds to minutes
    gaps = [b.t - a.t for s in by_session.values() for a, b in itertools.pairwise(s)]
    assert statistics.median(gaps) > 2.0 and max(gaps) > 60.0


def test_busy_scales_session_starts_only():
    lo = generate(preset("swebench", sessions=8, busy=0.3))
    hi = generate(preset("swebench", sessions=8, busy=0.9))

    def offsets(reqs):
        first, out = {}, {}
        for r in reqs:
            s0 = first.setdefault(r.session_id, r.t)
            out.setdefault(r.session_id, []).append((round(r.t - s0, 4), r.block_hashes, r.tool_seconds))
        return out, first

    (o_lo, f_lo), (o_hi, f_hi) = offsets(lo), offsets(hi)
    assert o_lo == o_hi  # same sessions, pauses and in-session gaps
    ratio = [(f_lo[s] - f_lo["swebench-0"]) / (f_hi[s] - f_hi["swebench-0"]) for s in f_lo if s != "swebench-0"]
    assert all(abs(x - 3.0) < 1e-3 for x in ratio)  # starts 3x denser at 3x the busy share


def test_scale_session_starts_keeps_pauses():
    reqs = generate(preset("gaia", sessions=6))
    fast = regimes.scale_session_starts(reqs, 2.0)
    assert len(fast) == len(reqs) and fast[-1].t < reqs[-1].t
    assert all(a.t <= b.t for a, b in itertools.pairwise(fast))


def test_running_set_and_occupancy_measure_the_regime():
    reqs = generate(preset("swebench", sessions=12, busy=0.7))
    rs = regimes.running_set(reqs)
    assert 0 < rs["blocks_p50"] <= rs["blocks_p90"] <= rs["blocks_max"]
    slow = generate(spec_for(GridPreset("swebench", 12, 2.0), "slow", 0.7, 0))
    fast = generate(spec_for(GridPreset("swebench", 12, 2.0), "fast", 0.7, 0))
    # slow tools leave more sessions idle on a tool
    assert regimes.occupancy(slow)["sessions_tool_idle_mean"] > regimes.occupancy(fast)["sessions_tool_idle_mean"]
    b = regimes.busy_share(reqs)
    assert 0 < b["busy_offered"] < 1.5


def test_crossing_interpolates_and_censors():
    assert crossing([(1.0, 0.5), (2.0, 4.0)], 2.0) == pytest.approx((1.0 + 2.0 / 3.0, None))
    assert crossing([(1.0, 3.0), (2.0, 4.0)], 2.0) == (0.0, "below")
    assert crossing([(1.0, 0.1), (2.0, 0.2)], 2.0) == (2.0, "above")


@pytest.fixture(scope="module")
def quick():
    return run_grid("quick", jobs=1)


def test_grid_json_shape(quick, tmp_path):
    cells = quick["grid"]
    assert json.loads(json.dumps(quick, default=float))  # JSON-ready
    g = GRIDS["quick"]
    assert len(cells) == len(g.presets) * len(g.busy) * len(g.cache_x) * len(g.pauses)
    wanted = {"lru", "history", "oracle-keeper", "oracle-keeper-blind", "belady", "scout-proxy", *SESSION_POLICIES}
    ran = set(quick["policies"])
    assert ran | set(quick["unavailable_policies"]) == wanted
    assert ran == {p for p in wanted if p in POLICIES or p in BLIND_POLICIES or p in SESSION_POLICIES}
    for c in cells:
        assert {"preset", "pauses", "busy", "cache_x_running_set", "capacity_blocks", "measured"} <= set(c["params"])
        assert set(c["policies"]) == ran
        for s in c["policies"].values():
            for key in ("hit_rate", "ttft_mean_s", "ttft_resume_mean_s", "turn_mean_s", "throughput_at_budget_rps"):
                assert key in s
            assert s["throughput_replanned_rps"] >= 0
            assert not any(k.startswith("_") for k in s)
        h = c["headroom"]
        lru, bel = c["policies"]["lru"]["ttft_mean_s"], c["policies"]["belady"]["ttft_mean_s"]
        assert h["ttft_mean"] == pytest.approx(1 - bel / lru)
        assert set(c["captured"]) == ran
        if h["ttft_mean"] >= 0.01:
            assert c["captured"]["lru"]["of_belady_ttft_mean"] == pytest.approx(0.0)
            assert c["captured"]["belady"]["of_belady_ttft_mean"] == pytest.approx(1.0)


def test_grid_sweeps_the_params(quick):
    g = GRIDS["quick"]
    seen = {(c["params"]["preset"], c["params"]["busy"], c["params"]["cache_x_running_set"]) for c in quick["grid"]}
    assert seen == set(itertools.product([p.name for p in g.presets], g.busy, g.cache_x))
    for preset_name in [p.name for p in g.presets]:
        cells = [c for c in quick["grid"] if c["params"]["preset"] == preset_name]
        caps = {c["params"]["cache_x_running_set"]: c["params"]["capacity_blocks"] for c in cells}
        ref = cells[0]["params"]["measured"]["running_set_blocks_p90_ref"]
        assert all(caps[x] == max(1, round(x * ref)) for x in caps)  # multiples of the running set
        rates = {c["params"]["busy"]: c["params"]["measured"]["request_rate"] for c in cells}
        assert rates[max(rates)] > rates[min(rates)]  # more load, more requests per second


def test_cli_grid_writes_report_and_map(tmp_path):
    from proxy.replay.grid_report import markdown, picture

    small = GridSpec(
        presets=(GridPreset("gaia", 4, 2.0),), busy=(0.5, 0.9), cache_x=(1.0,), pauses=("fast",), extra_busy=()
    )
    res = run_grid("tiny", jobs=1, grid=small)
    md = markdown(res, {"title": "grid tiny", "command": "cachescout replay --grid tiny"}, ["headroom_map.png"])
    assert "## gaia" in md and md.count("\n| fast |") == 2
    pytest.importorskip("matplotlib")
    path = picture(res, tmp_path / "headroom_map.png")
    assert (tmp_path / "headroom_map.png").stat().st_size > 1000 and path.endswith(".png")


def test_cli_flag(tmp_path, monkeypatch):
    from proxy import cli
    from proxy.replay import grid

    tiny = GridSpec(presets=(GridPreset("gaia", 3, 2.0),), busy=(0.5,), cache_x=(1.0,), pauses=("fast",), extra_busy=())
    monkeypatch.setitem(grid.GRIDS, "quick", tiny)

    out = tmp_path / "g"
    rc = cli.main(["replay", "--grid", "quick", "--out", str(out), "--jobs", "1", "--no-progress", "--no-plots"])
    assert rc == 0
    doc = json.loads((out / "report.json").read_text())
    assert len(doc["results"]["grid"]) == 1 and (out / "report.md").is_file()
    assert doc["meta"]["command"] == f"cachescout replay --grid quick --out {out}"


def test_new_presets_keep_their_spec_fields():
    assert PRESETS["coding-agent"].topology == "solo" and PRESETS["chat-agents"].topology == "solo"
    assert replace(PRESETS["selector"], busy=None) == PRESETS["selector"]
