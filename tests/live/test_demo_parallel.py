"""`cachescout demo` with seeds run side by side (`--parallel`) and the baseline through a policy-off
proxy (`--baseline-hop`), at a tiny size over real sockets: each seed's pair is its own, the JSON
keeps every seed in order, and both sides send the same seeded workload with no error."""

import json

import pytest

from proxy.cli import main

pytestmark = pytest.mark.sockets


def test_two_seeds_at_once_with_the_baseline_through_a_policy_off_proxy(tmp_path, capsys):
    out = tmp_path / "demo.json"
    rc = main(
        [
            "demo",
            "--seeds",
            "2",
            "--parallel",
            "2",
            "--baseline-hop",
            "--scene",
            "agents_at_work",
            "--sessions",
            "2",
            "--time-scale",
            "0.1",
            "--no-progress",
            "--no-plot",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    assert "mean TTFT, engine clock" in capsys.readouterr().out
    data = json.loads(out.read_text())
    runs = data["scenes"]["agents_at_work"]["runs"]
    assert [r["seed"] for r in runs] == [1, 2] == data["seeds"]
    for r in runs:
        d, p = r["direct"], r["proxy"]
        assert d["errors"] == 0 and p["errors"] == 0 and d["requests"] > 0
        assert d["prompt_tokens"] == p["prompt_tokens"]  # the same seeded workload on both sides
        assert d["engine_client_ttft_mean_s"] > 0 and p["engine_client_ttft_mean_s"] > 0
    # different seeds are different workloads (each pair ran its own seed)
    assert runs[0]["direct"]["prompt_tokens"] != runs[1]["direct"]["prompt_tokens"]
