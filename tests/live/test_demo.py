"""`cachescout demo` end to end at a tiny size (scene 1, one seed, real sockets): the table prints
and the JSON has the documented shape, its figures consistent with each other. The full-size
figures are in docs/demo.md."""

import json
import math

import pytest

from proxy.cli import main

pytestmark = pytest.mark.sockets

KEYS = ("ttft_mean_s", "ttft_p99_s", "turn_mean_s", "workload_hit_rate", "ttft_resume_mean_s", "session_mean_s")


def test_demo_json_shape_on_a_tiny_quick_run(tmp_path, capsys):
    out = tmp_path / "demo.json"
    rc = main(
        [
            "demo",
            "--quick",
            "--scene",
            "agents_at_work",
            "--sessions",
            "3",
            "--time-scale",
            "0.1",
            "--no-progress",
            "--out",
            str(tmp_path / "pic"),
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "Scene 1: agents at work" in text and "tool-resume TTFT (mean)" in text and "why: " in text
    data = json.loads(out.read_text())
    assert data["seeds"] == [1]
    assert set(data["scenes"]) == {"agents_at_work"}
    assert (tmp_path / "pic" / "demo-ttft.png").stat().st_size > 0
    for scene in data["scenes"].values():
        d, p, runs = scene["direct"], scene["proxy"], scene["runs"]
        for key in KEYS:
            assert math.isfinite(d[key]) and math.isfinite(p[key]), key
        assert len(runs) == 1 and runs[0]["seed"] == 1
        run_d, run_p = runs[0]["direct"], runs[0]["proxy"]
        # one seed: the medians are that seed's figures
        assert all(d[k] == run_d[k] and p[k] == run_p[k] for k in KEYS)
        assert run_d["errors"] == 0 and run_p["errors"] == 0
        assert run_d["requests"] > 0 and run_d["prompt_tokens"] == run_p["prompt_tokens"]  # same seeded workload
        assert run_d["tool_resumes"] > 0  # every turn of a tool agent makes tool calls
        assert run_d["ttft_resume_mean_s"] > 0 and run_d["ttft_p50_s"] <= run_d["ttft_p99_s"]
        assert 0 <= run_d["workload_hit_rate"] < 1
        assert "actions_skipped" in run_p and "signals" in run_p
        assert not any(k.startswith("_") for k in run_d)  # raw distributions stay out of the JSON
        # the engine's counters see the workload's own tokens plus the proxy's warmups
        assert run_d["engine_prompt_tokens"] == run_d["prompt_tokens"]
        assert run_p["prompt_tokens"] <= run_p["engine_prompt_tokens"]


def _pair(direct_ttft, proxy_ttft, skipped=None, emitted=None, signals=None):
    base = {
        "ttft_mean_s": direct_ttft,
        "ttft_p50_s": direct_ttft,
        "ttft_p99_s": 2 * direct_ttft,
        "ttft_resume_mean_s": direct_ttft,
        "turn_mean_s": 1.0,
        "session_mean_s": 10.0,
        "workload_hit_rate": 0.5,
        "requests": 10,
        "tool_resumes": 4,
        "prompt_tokens": 1000,
        "errors": 0,
        "warm_requests": 0,
        "warm_computed_tokens": 0,
    }
    prox = {
        **base,
        "ttft_mean_s": proxy_ttft,
        "ttft_resume_mean_s": proxy_ttft,
        "workload_hit_rate": 0.6,
        "warm_requests": 5,
        "warm_computed_tokens": 20,
        "actions_skipped": skipped or {},
        "actions_by_reason": emitted or {},
        "signals": signals or {},
    }
    return {"direct": base, "proxy": prox}


def test_scene_table_gives_medians_and_the_spread_over_seeds():
    from proxy.demo.report import format_scene, medians

    pairs = [_pair(0.2, 0.1), _pair(0.2, 0.15), _pair(0.4, 0.2)]
    assert medians([p["proxy"] for p in pairs])["ttft_mean_s"] == 0.15
    table = format_scene("Scene X", pairs)
    # per-seed changes -50%, -25%, -50%: median -50%, spread [-50 .. -25]
    assert "mean TTFT" in table and "-50.0%  [-50.0 .. -25.0]" in table
    assert "+10.0 pp" in table and "2.0% of client prompt tokens" in table


def test_json_has_medians_over_seeds_and_each_runs_figures():
    from proxy.demo.report import scenes_json

    pairs = []
    for seed, (d, p) in enumerate(((0.2, 0.1), (0.3, 0.3), (0.4, 0.2)), 1):
        pair = _pair(d, p)
        pair["seed"] = seed
        pair["proxy"]["_ttfts"] = [p]
        pairs.append(pair)
    doc = scenes_json({"agents_at_work": pairs, "saturated": pairs[:1]})
    a = doc["agents_at_work"]
    assert a["direct"]["ttft_mean_s"] == 0.3 and a["proxy"]["ttft_mean_s"] == 0.2
    assert a["proxy"]["session_mean_s"] == 10.0 and a["proxy"]["workload_hit_rate"] == 0.6
    assert [r["seed"] for r in a["runs"]] == [1, 2, 3] and a["runs"][2]["direct"]["ttft_mean_s"] == 0.4
    assert "_ttfts" not in a["runs"][0]["proxy"]
    assert doc["saturated"]["proxy"]["ttft_resume_mean_s"] == 0.1


def test_why_line_names_what_held_the_planner_back():
    from proxy.demo.report import why

    overflow = [_pair(1.0, 1.0, skipped={"tick_overflow": 300, "tick_engine_busy": 20})]
    line = why(overflow)
    assert "only observes" in line and "tick_overflow 300" in line
    paid = [
        _pair(
            0.4,
            0.2,
            skipped={"resident": 50},
            emitted={"warm/tool_resume": 12},
            signals={"tool_resume": {"saved_tokens": 9000.0, "spent_tokens": 3000.0}},
        )
    ]
    line = why(paid)
    assert "warm/tool_resume 12" in line and "saved 9,000 tokens for 3,000" in line


def test_progress_without_a_tty_prints_a_line_per_ten_percent(capsys):
    from proxy.demo.progress import DualProgress, Progress

    bars = {name: Progress(name, 40, False, tty=False) for name in ("direct", "via proxy")}
    both = DualProgress(bars, True, tty=False)
    for _ in range(40):
        both.tick("direct")
    for _ in range(7):
        both.tick("via proxy")
    both.close()
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert [ln.split()[1] for ln in lines if ln.split()[0] == "direct"] == [f"{10 * k}%" for k in range(1, 11)]
    proxy_lines = [ln for ln in lines if "via proxy" in ln]
    assert len(proxy_lines) == 1 and proxy_lines[0].startswith("  via proxy   10% (4/40 requests)")
