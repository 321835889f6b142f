"""The Claude Code loader and composer (proxy/replay/claude_code.py): the README's rules, on small
synthetic documents, and the shared draw's figures when ../shared/traces/claude-code is present."""

import json
import random
from pathlib import Path

import pytest

from proxy.replay.claude_code import (
    NAMESPACE_BITS,
    MalformedFile,
    compose,
    draw,
    global_block,
    load,
    load_trace_cc,
    parse_document,
)

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "claude-code"


def _req(t, ids, stop="tool_use", **kw):
    return {
        "t": t,
        "type": "n",
        "model": "m",
        "in": 64 * len(ids) + 10,
        "out": 5,
        "hash_ids": ids,
        "stop": stop,
        "api_time": 1.5,
        "think_time": 2.0,
        **kw,
    }


def _doc(fid, reqs, **kw):
    return {
        "id": fid,
        "block_size": 64,
        "hash_id_scope": "local",
        "tool_tokens": 128,
        "system_tokens": 64,
        "requests": reqs,
        **kw,
    }


def test_subagent_is_its_own_session_starting_at_t_minus_duration():
    sub = {
        "t": 50.0,
        "type": "subagent",
        "agent_id": "agent_001",
        "subagent_type": "Explore",
        "duration_ms": 20000,
        "tool_tokens": 64,
        "system_tokens": 0,
        "requests": [_req(0.0, [7, 8]), _req(5.0, [7, 8, 9], stop="end_turn")],
    }
    f = parse_document(_doc("a", [_req(0.0, [1, 2]), sub, _req(60.0, [1, 2, 3], stop="end_turn")]), "a.json")
    main, agent = f.sessions
    assert main.session_id == "a" and agent.session_id == "a/agent_001" and agent.parent == "a"
    assert agent.start == 30.0 and [r.t for r in agent.requests] == [30.0, 35.0]
    assert agent.launched_after == 0 and agent.subagent_type == "Explore"
    assert [r.stop for r in main.requests] == ["tool_use", "end_turn"]
    assert main.requests[0].finish_reason == "tool_calls" and main.requests[1].finish_reason == "stop"
    assert main.requests[0].api_time == 1.5 and main.requests[0].think_time == 2.0
    assert main.fixed_tokens == 192
    comp = compose([f], users=1, window=0.0, horizon=None, seed=0)
    assert [r.session_id for r in comp.requests] == ["a", "a/agent_001", "a/agent_001", "a"]
    # one namespace: the subagent's ids and the parent's map through the same user
    assert comp.requests[1].block_hashes == (global_block(0, 7), global_block(0, 8))
    assert comp.requests[0].anchor_blocks == 2 and comp.requests[1].anchor_blocks == 1


def test_users_never_share_a_block_and_unknown_fields_are_ignored():
    a = parse_document(_doc("a", [_req(0.0, [1, 2], extra={"x": 1})], novel=True), "a.json")
    b = parse_document(_doc("b", [_req(0.0, [1, 2])]), "b.json")
    comp = compose([a, b], users=2, window=10.0, horizon=None, seed=3)
    ids = [set(r.block_hashes) for r in comp.requests]
    assert len(comp.requests) == 2 and not ids[0] & ids[1]
    assert global_block(0, (1 << NAMESPACE_BITS) - 1) < global_block(1, 0)


def test_draw_follows_the_readme_rules():
    names = [f"trace_{i:04d}.json" for i in (8, 2, 6, 4)]
    rng = random.Random(5)
    order = sorted(names)
    rng.shuffle(order)
    want = [(n, rng.uniform(0.0, 100.0)) for n in order[:3]]
    assert draw(names, 3, 100.0, 5) == want


def test_horizon_drops_late_requests():
    f = parse_document(_doc("a", [_req(0.0, [1]), _req(100.0, [1, 2])]), "a.json")
    comp = compose([f], users=1, window=0.0, horizon=50.0, seed=0)
    assert len(comp.requests) == 1 and comp.dropped == 1


def test_malformed_files_are_counted_and_named_never_fatal(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps(_doc("a", [_req(0.0, [1, 2])])))
    (tmp_path / "b.json").write_text("{not json")
    (tmp_path / "c.json").write_text(json.dumps({"id": "c"}))
    (tmp_path / "d.json").write_text(json.dumps(_doc("d", [{"t": 1.0}, _req(2.0, [3])])))
    (tmp_path / "notes.txt").write_text("ignored")
    res = load(tmp_path)
    assert [f.id for f in res.files] == ["a", "d"] and res.malformed == 2
    assert [n for n, _ in res.malformed_files] == ["b.json", "c.json"]
    assert res.files[1].skipped == 1
    lr = load_trace_cc(tmp_path, users=None, horizon=None)
    assert lr.malformed == 2 and len(lr.requests) == 2 and lr.format == "claude-code"
    assert "b.json" in lr.malformed_examples[0][1]
    with pytest.raises(MalformedFile):
        parse_document([1, 2])


def test_shared_draw_matches_the_readme():
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent: the Claude Code draw needs ../shared/traces/claude-code next to the repo")
    res = load(SHARED)
    assert len(res.files) == 64 and res.malformed == 0
    assert sum(f.requests for f in res.files) + sum(len(f.sessions) - 1 for f in res.files) == 3247
    comp = compose(res.files, users=32, window=1800.0, horizon=7200.0, seed=0)
    assert len(comp.requests) == 1447
    assert comp.block_accesses == 2_220_473 and comp.unique_blocks == 116_522
