"""The fleet replay: routing rules, separate caches per replica, merged figures, snapshot bootstrap."""

from __future__ import annotations

import argparse
import json

import pytest

from proxy.replay.cli import add_arguments, run
from proxy.replay.fleet_report import split_for_bootstrap
from proxy.replay.replicas import learned_snapshot, replay_fleet, route, scale_table
from proxy.replay.runner import ReplaySettings, replay, resolve_capacity
from proxy.replay.workloads import generate, preset


@pytest.fixture(scope="module")
def stream():
    return generate(preset("selector", sessions=24, seed=3))


def test_session_routing_keeps_every_session_on_one_replica(stream):
    where = route(stream, 4, "session")
    by_session: dict[str, set[int]] = {}
    for r, k in zip(stream, where, strict=False):
        by_session.setdefault(r.session_id, set()).add(k)
    assert all(len(v) == 1 for v in by_session.values())
    assert len(set(where)) > 1


def test_round_robin_spreads_a_session(stream):
    where = route(stream, 4, "round_robin")
    assert where[:8] == [0, 1, 2, 3, 0, 1, 2, 3]
    spread = {}
    for r, k in zip(stream, where, strict=False):
        spread.setdefault(r.session_id, set()).add(k)
    assert max(len(v) for v in spread.values()) > 1


def test_prefix_routing_follows_the_longest_routed_prefix(stream):
    """Like vllm-router cache_aware: a request goes where its longest prefix was routed before, so an
    agent's requests (same anchor, its first blocks) gather on one replica."""
    where = route(stream, 3, "prefix")
    by_anchor: dict[int, list[int]] = {}
    for r, k in zip(stream, where, strict=False):
        by_anchor.setdefault(r.block_hashes[0], []).append(k)
    for ks in by_anchor.values():
        assert max(ks.count(k) for k in set(ks)) / len(ks) >= 0.8
    assert len(set(where)) > 1
    with pytest.raises(ValueError):
        route(stream, 2, "hash")


def test_one_replica_is_the_single_engine_replay(stream):
    cap = resolve_capacity(0.03, stream)
    single = replay(stream, [cap], ["scout-proxy"], ReplaySettings())["capacities"][0]["policies"]
    fleet = replay_fleet(stream, cap, ["scout-proxy"], 1, "session")["policies"]
    for name in ("lru", "scout-proxy"):
        assert fleet[name]["hit_rate"] == pytest.approx(single[name]["hit_rate"])
        assert fleet[name]["ttft_mean_s"] == pytest.approx(single[name]["ttft_mean_s"])


def test_fleet_merges_replicas_and_round_robin_starves_learning(stream):
    cap = resolve_capacity(0.03, stream)
    rows = {(r["routing"], r["replicas"]): r for r in scale_table(stream, cap, [1, 4], ["round_robin", "session"])}
    assert rows[("session", 4)]["top1_accuracy"] > rows[("round_robin", 4)]["top1_accuracy"]
    assert rows[("session", 4)]["gain_pp"] > rows[("round_robin", 4)]["gain_pp"]
    res = replay_fleet(stream, cap, ["scout-proxy"], 4, "session")
    assert sum(res["policies"]["lru"]["per_replica_requests"]) == len(stream)


def test_bootstrap_snapshot_helps_a_cold_fleet(stream):
    cap = resolve_capacity(0.03, stream)
    learn, measure = split_for_bootstrap(stream, 0.5)
    assert learn and measure and learn[-1].t <= measure[0].t
    snap = learned_snapshot(learn, cap)
    cold = replay_fleet(measure, cap, ["scout-proxy"], 4, "session")["policies"]["scout-proxy"]
    warm = replay_fleet(measure, cap, ["scout-proxy"], 4, "session", snapshot=snap)["policies"]["scout-proxy"]
    assert warm["hit_rate"] >= cold["hit_rate"]
    assert warm["predictions"] > 0
    with pytest.raises(ValueError):
        split_for_bootstrap(stream, 1.0)


def test_cli_replicas_and_scale(tmp_path, capsys):
    p = argparse.ArgumentParser()
    add_arguments(p)
    out = tmp_path / "o"
    assert (
        run(
            p.parse_args(
                [
                    "--workload",
                    "selector",
                    "--sessions",
                    "12",
                    "--replicas",
                    "2",
                    "--routing",
                    "round_robin",
                    "--capacity",
                    "0.03",
                    "--policies",
                    "scout-proxy",
                    "--out",
                    str(out),
                    "--no-progress",
                ]
            )
        )
        == 0
    )
    res = json.loads((out / "fleet.json").read_text())
    assert res["capacities"][0]["fleet"]["routing"] == "round_robin"
    assert (
        run(
            p.parse_args(
                [
                    "--workload",
                    "selector",
                    "--sessions",
                    "8",
                    "--scale",
                    "1,2",
                    "--scale-load",
                    "--capacity",
                    "0.03",
                    "--policies",
                    "scout-proxy",
                    "--out",
                    str(out),
                    "--no-progress",
                ]
            )
        )
        == 0
    )
    text = (out / "fleet.md").read_text()
    assert "| session | 2 |" in text and "| prefix | 1 |" in text
    assert (
        run(
            p.parse_args(
                ["--trace", str(tmp_path / "missing.jsonl"), "--scale", "1,2", "--scale-load", "--out", str(out)]
            )
        )
        == 2
    )
