"""`cachescout demo` end to end at a tiny size: both phases run on real sockets, the table prints,
and the JSON figures are consistent with each other (the full-size figures are in docs/live.md)."""

import json

import pytest

from proxy.cli import main

pytestmark = pytest.mark.sockets


def test_demo_runs_both_phases(tmp_path, capsys):
    out = tmp_path / "demo.json"
    rc = main(
        [
            "demo",
            "--sessions",
            "4",
            "--concurrency",
            "4",
            "--speed",
            "4",
            "--no-progress",
            "--tool-seconds",
            "0.02",
            "0.05",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "workload prefix hit rate (usage)" in text and "via proxy" in text
    data = json.loads(out.read_text())
    d, p = data["direct"], data["proxy"]
    assert d["errors"] == 0 and p["errors"] == 0
    assert d["requests"] > 0 and d["prompt_tokens"] == p["prompt_tokens"]  # same seeded workload
    assert 0 < d["workload_hit_rate"] < 1 and 0 < p["workload_hit_rate"] < 1
    assert p["agents_learned"] >= 1
    # the engine's counters see the workload's own tokens plus the warmups sent before the phase ended
    assert p["prompt_tokens"] <= p["engine_prompt_tokens"] <= p["prompt_tokens"] + p["warm_prompt_tokens"]
    assert d["engine_prompt_tokens"] == d["prompt_tokens"]


def test_table_formatting():
    from proxy.demo.report import format_table

    base = {
        "workload_hit_rate": 0.5,
        "engine_hit_rate": 0.5,
        "ttft_mean_s": 0.2,
        "ttft_p50_s": 0.1,
        "ttft_p99_s": 0.9,
        "turn_mean_s": 1.0,
        "requests": 10,
        "tool_resumes": 2,
        "prompt_tokens": 1000,
        "warm_requests": 0,
        "warm_prompt_tokens": 0,
        "warm_computed_tokens": 0,
        "errors": 0,
        "wall_s": 3.0,
    }
    prox = {
        **base,
        "workload_hit_rate": 0.6,
        "ttft_mean_s": 0.1,
        "warm_requests": 5,
        "warm_prompt_tokens": 200,
        "warm_computed_tokens": 20,
    }
    table = format_table(base, prox)
    assert "+10.0 pp" in table and "-50.0%" in table and "20.0% of client" in table


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
