"""`cachescout replay` end to end: report.md, report.json and plots from a workload and a trace."""

import argparse
import json

import pytest

from proxy.replay import cli as replay_cli


def _args(*argv):
    p = argparse.ArgumentParser()
    replay_cli.add_arguments(p)
    return p.parse_args(list(argv))


def test_workload_replay_writes_report_json_md_and_plots(tmp_path, capsys):
    out = tmp_path / "rep"
    rc = replay_cli.run(
        _args(
            "--workload",
            "pipeline",
            "--sessions",
            "12",
            "--capacity",
            "150,300",
            "--policies",
            "lru,history,scout-proxy",
            "--out",
            str(out),
            "--no-progress",
            "--scout-set",
            "cooldown_s=1.0",
            "--engines",
            "2",
            "--retention-seconds",
            "60",
        )
    )
    assert rc == 0
    doc = json.loads((out / "report.json").read_text())
    caps = doc["results"]["capacities"]
    assert [c["capacity_blocks"] for c in caps] == [150, 300]
    pols = caps[0]["policies"]
    assert list(pols) == ["lru", "history", "scout-proxy", "belady"]
    for s in pols.values():
        assert 0.0 <= s["hit_rate"] <= 1.0 and s["ttft_p99_s"] >= s["ttft_p50_s"]
    assert pols["belady"]["gap_closed"] == 1.0 and pols["lru"]["gap_closed"] == 0.0
    assert doc["meta"]["settings"]["scout_overrides"] == {"cooldown_s": 1.0}
    assert doc["meta"]["settings"]["engines"] == 2 and doc["meta"]["settings"]["retention_s"] == 60.0
    assert doc["meta"]["source"]["workload"]["sessions"] == 12
    assert len(doc["closing_note"]) == 2 and "of the gap" in doc["closing_note"][0]
    md = (out / "report.md").read_text()
    assert "## Closing note" in md and "| scout-proxy |" in md
    for name in ("hit_rate_vs_capacity.png", "lead_time_cdf.png", "ttft_cdf.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "report:" in capsys.readouterr().out


def test_trace_replay_reports_malformed_lines(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    lines = [
        json.dumps(
            {
                "timestamp": 100 * i,
                "input_length": 2048,
                "output_length": 10,
                "hash_ids": [0, 1 + i % 5, 100 + i, 200 + i],
            }
        )
        for i in range(40)
    ]
    lines.insert(3, "garbage")
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "rep"
    rc = replay_cli.run(
        _args(
            "--trace",
            str(trace),
            "--capacity",
            "8",
            "--policies",
            "lru,ttl",
            "--out",
            str(out),
            "--no-plots",
            "--no-progress",
        )
    )
    assert rc == 0
    doc = json.loads((out / "report.json").read_text())
    assert doc["meta"]["source"]["format"] == "mooncake"
    assert doc["meta"]["source"]["malformed_lines"] == 1
    assert "line 4" in doc["meta"]["source"]["malformed_examples"]
    assert doc["results"]["requests"] == 40
    assert "malformed" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ("--workload", "selector", "--policies", "lru,nope"),
        ("--workload", "selector", "--scout-set", "no_such_knob=1"),
        ("--workload", "selector", "--scout-set", "novalue"),
        ("--trace", "/nonexistent/trace.jsonl"),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path, capsys, argv):
    assert replay_cli.run(_args(*argv, "--out", str(tmp_path / "x"), "--no-progress")) == 2
    assert "cachescout replay:" in capsys.readouterr().err


def test_parse_overrides_types_values():
    assert replay_cli.parse_overrides(["a=1", "b=0.5", "c=true", "d=x"]) == {"a": 1, "b": 0.5, "c": True, "d": "x"}


def test_cachescout_entry_point_dispatches_replay(tmp_path):
    from proxy.cli import main

    rc = main(
        [
            "replay",
            "--workload",
            "debate",
            "--sessions",
            "6",
            "--capacity",
            "200",
            "--policies",
            "lru",
            "--out",
            str(tmp_path / "r"),
            "--no-plots",
            "--no-progress",
        ]
    )
    assert rc == 0 and (tmp_path / "r" / "report.md").exists()


def test_progress_without_tty_is_one_line_per_decile(capsys):
    """Logs (CI, redirected stderr) get one line per 10% per phase, never `\\r` progress bars."""
    from proxy.replay.runner import _bar

    show = _bar("lru @ 100", 1000, True)
    assert show is not None
    for i in range(1000):
        show(i)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert len(lines) == 11 and lines[0].strip().endswith("0% (1/1000)")  # start + every 10%
    assert lines[-1].endswith("100% (1000/1000)")
