"""Session references in both modes and the `--format claude-code` CLI (cache-only and engine)."""

import argparse
import json
import random

from proxy.replay import cli as replay_cli
from proxy.replay.cache_only import cache_only_hits
from proxy.replay.engine_presets import PRESETS, engine_preset
from proxy.replay.runner import ReplaySettings, replay
from proxy.replay.traces import ReplayRequest


def _args(*argv):
    p = argparse.ArgumentParser()
    replay_cli.add_arguments(p)
    return p.parse_args(list(argv))


def _sessions(n_sess=6, turns=6, seed=1, base=40):
    """Sessions growing their own chain; half come back after seconds, half after minutes."""
    rng = random.Random(seed)
    reqs = []
    for s in range(n_sess):
        t = rng.uniform(0, 5)
        chain = [s * 10_000 + k for k in range(base)]
        for _k in range(turns):
            chain = chain + [s * 10_000 + len(chain) + j for j in range(4)]
            tool = s % 2 == 0
            reqs.append(
                ReplayRequest(
                    t=t,
                    tenant="",
                    block_hashes=tuple(chain),
                    block_tokens=(16,) * len(chain),
                    output_tokens=4,
                    session_id=f"s{s}",
                    finish_reason="tool_calls" if tool else "stop",
                )
            )
            t += 2.0 if tool else 60.0 + rng.uniform(0, 30)
    reqs.sort(key=lambda r: r.t)
    return reqs


def test_engine_mode_session_oracle_beats_lru_when_pauses_differ():
    reqs = _sessions()
    res = replay(
        reqs, [150], ["session-oracle", "session-oracle-blind", "session-pauses"], ReplaySettings(block_size=16)
    )
    pols = res["capacities"][0]["policies"]
    assert pols["session-oracle"]["hit_rate"] > pols["lru"]["hit_rate"]
    assert pols["session-oracle"]["hit_rate"] <= pols["belady"]["hit_rate"] + 1e-9
    for name in ("session-oracle-blind", "session-pauses"):
        assert 0.0 <= pols[name]["hit_rate"] <= 1.0
    # cache-only agrees on the ordering
    total = sum(len(r.block_hashes) for r in reqs)
    lru = sum(cache_only_hits(reqs, 150, "lru")) / total
    orc = sum(cache_only_hits(reqs, 150, "session-oracle")) / total
    assert orc > lru


def _write_cc(folder, n=3):
    for k in range(n):
        reqs = []
        ids = list(range(40))
        for j in range(5):
            ids = ids + [100 + 10 * j + x for x in range(3)]
            reqs.append(
                {
                    "t": 20.0 * j,
                    "type": "n",
                    "in": 64 * len(ids) + 5,
                    "out": 8,
                    "hash_ids": ids,
                    "stop": "tool_use" if j % 2 == 0 else "end_turn",
                    "api_time": 1.0,
                    "think_time": 5.0,
                    "new_field": [1],
                }
            )
        doc = {"id": f"trace_{k:04d}", "block_size": 64, "tool_tokens": 1000, "system_tokens": 200, "requests": reqs}
        (folder / f"trace_{k:04d}.json").write_text(json.dumps(doc))
    (folder / "trace_9999.json").write_text("[]")


def test_cli_claude_code_cache_only_and_engine(tmp_path, capsys):
    src = tmp_path / "cc"
    src.mkdir()
    _write_cc(src)
    common = [
        "--trace",
        str(src),
        "--format",
        "claude-code",
        "--users",
        "3",
        "--window",
        "30",
        "--horizon",
        "7200",
        "--seed",
        "0",
        "--capacity",
        "80,160",
        "--no-plots",
        "--no-progress",
    ]
    out = tmp_path / "co"
    assert (
        replay_cli.run(_args(*common, "--policies", "lru,session-oracle,belady", "--cache-only", "--out", str(out)))
        == 0
    )
    doc = json.loads((out / "report.json").read_text())
    caps = doc["results"]["capacities"]
    assert [c["capacity_blocks"] for c in caps] == [80, 160]
    assert set(caps[0]["policies"]) == {"lru", "session-oracle", "belady"}
    assert doc["results"]["requests"] == 15
    assert "trace_9999.json" in doc["meta"]["source"]["malformed_examples"]
    out2 = tmp_path / "eng"
    assert (
        replay_cli.run(
            _args(*common, "--policies", "lru,session-oracle", "--engine-preset", "h100x8-70b-fp8", "--out", str(out2))
        )
        == 0
    )
    caps = json.loads((out2 / "report.json").read_text())["results"]["capacities"]
    for c in caps:
        for name in ("lru", "session-oracle", "belady"):
            s = c["policies"][name]
            assert 0.0 <= s["hit_rate"] <= 1.0 and s["ttft_mean_s"] > 0
    assert "malformed" in capsys.readouterr().err


def test_engine_presets_are_the_documented_figures():
    p = engine_preset("h100x8-70b")
    assert p.kv_bytes_per_token == 80 * 8 * 128 * 2 * 2
    # a cold 110k-token prompt: ~4.8 s linear + ~5.0 s attention on the bf16 preset
    assert 9.0 < p.prefill_s(110_000) < 10.5
    assert PRESETS["h100x8-70b-fp8"].prefill_s(110_000) < p.prefill_s(110_000)
