"""Trace loaders: every format into one stream; malformed lines counted, never fatal."""

import json

import pytest

from proxy.replay.traces import Malformed, block_tokens_for, detect_format, load_lines, load_trace, text_blocks


def _lines(*objs):
    return [o if isinstance(o, str) else json.dumps(o) for o in objs]


def test_mooncake_record_becomes_request_in_seconds_with_partial_last_block():
    res = load_lines(_lines({"timestamp": 1500, "input_length": 1100, "output_length": 7, "hash_ids": [0, 5, 9]}))
    assert res.format == "mooncake" and res.block_size == 512 and res.malformed == 0
    (r,) = res.requests
    assert r.t == 1.5
    assert r.block_hashes == (0, 5, 9)
    assert r.block_tokens == (512, 512, 76)
    assert r.prompt_tokens == 1100 and r.output_tokens == 7


def test_malformed_lines_are_counted_with_reasons_and_the_rest_loads():
    res = load_lines(
        _lines(
            {"timestamp": 0, "input_length": 10, "hash_ids": [1]},
            "{not json",
            "[1, 2]",
            {"timestamp": 5, "input_length": 10},  # no hash_ids
            {"timestamp": "soon", "input_length": 10, "hash_ids": [2]},
            {"timestamp": 3, "input_length": 10, "hash_ids": [3, "x"]},
            "",
            {"timestamp": 2, "input_length": 10, "hash_ids": [4]},
        ),
        "mooncake",
    )
    assert res.lines == 7  # blank lines are not records
    assert res.malformed == 5
    assert [r.block_hashes for r in res.requests] == [(1,), (4,)]
    reasons = " ".join(why for _, why in res.malformed_examples)
    assert "not JSON" in reasons and "hash_ids" in reasons and "not a JSON object" in reasons
    assert [n for n, _ in res.malformed_examples][:2] == [2, 3]


def test_requests_are_time_ordered_and_ties_keep_file_order():
    res = load_lines(
        _lines(*[{"timestamp": t, "input_length": 1, "hash_ids": [i]} for i, t in enumerate([30, 10, 10, 20])])
    )
    assert [r.block_hashes[0] for r in res.requests] == [1, 2, 3, 0]


def test_bailian_resolves_sessions_to_the_root_chat_and_keeps_category():
    res = load_lines(
        _lines(
            {
                "chat_id": 1,
                "parent_chat_id": -1,
                "timestamp": 0.5,
                "input_length": 40,
                "output_length": 3,
                "type": "text",
                "turn": 1,
                "hash_ids": [10, 11, 12],
            },
            {
                "chat_id": 2,
                "parent_chat_id": 1,
                "timestamp": 1.0,
                "input_length": 50,
                "output_length": 3,
                "type": "text",
                "turn": 2,
                "hash_ids": [10, 11, 12, 13],
            },
            {
                "chat_id": 3,
                "parent_chat_id": 2,
                "timestamp": 2.0,
                "input_length": 20,
                "type": "search",
                "turn": 3,
                "hash_ids": [10, 11],
            },
            {
                "chat_id": 4,
                "parent_chat_id": -1,
                "timestamp": 3.0,
                "input_length": 16,
                "type": "file",
                "turn": 1,
                "hash_ids": [20],
            },
        )
    )
    assert res.format == "bailian" and res.block_size == 16
    assert [r.session_id for r in res.requests] == ["1", "1", "1", "4"]
    assert [r.category for r in res.requests] == ["text", "text", "search", "file"]
    assert res.requests[0].block_tokens == (16, 16, 8)


def test_text_blocks_chain_so_an_extended_prompt_keeps_its_prefix():
    a, ta = text_blocks("x" * 200)
    b, tb = text_blocks("x" * 200 + "y" * 300)
    assert b[: len(a) - 1] == a[:-1]  # full blocks equal; a's partial tail differs
    assert a[-1] != b[len(a) - 1]
    assert sum(ta) == 50 and sum(tb) == 125
    assert text_blocks("x" * 200, salt="t1")[0][0] != a[0]


def test_lmcache_and_openai_formats_are_detected_and_loaded():
    lm = load_lines(
        _lines(
            {"timestamp": 1.0, "input": "hello " * 40, "output": "ok", "session_id": "s1"},
            {"timestamp": 2.0, "input": "hello " * 60, "output": "ok", "session_id": "s1"},
        )
    )
    assert lm.format == "lmcache" and lm.malformed == 0
    assert lm.requests[1].block_hashes[:3] == lm.requests[0].block_hashes[:3]
    oa = load_lines(
        _lines(
            {
                "timestamp": 1.0,
                "body": {
                    "model": "m",
                    "max_tokens": 64,
                    "cache_salt": "t",
                    "messages": [{"role": "system", "content": "be brief " * 30}, {"role": "user", "content": "hi"}],
                },
            },
            {"timestamp": 0.5, "prompt": "raw prompt " * 10, "model": "m"},
            {"timestamp": 2.0, "body": {"model": "m"}},
        )
    )
    assert oa.format == "openai" and oa.malformed == 1
    assert oa.requests[0].t == 0.5 and oa.requests[1].tenant == "t" and oa.requests[1].output_tokens == 64
    assert oa.requests[1].anchor_blocks > 0  # the live proxy's view marks the system prompt


def test_detect_format_rejects_unknown_records_as_malformed():
    with pytest.raises(Malformed):
        detect_format({"foo": 1})
    res = load_lines(_lines({"foo": 1}, {"timestamp": 0, "input_length": 1, "hash_ids": [1]}))
    assert res.malformed == 1 and len(res.requests) == 1


def test_block_tokens_trusts_ids_when_lengths_disagree():
    assert block_tokens_for(1024, 2, 512) == (512, 512)
    assert block_tokens_for(5000, 2, 512) == (512, 512)
    assert block_tokens_for(0, 0, 512) == ()


def test_load_trace_limit_and_unique_blocks(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(
        "\n".join(_lines(*[{"timestamp": i, "input_length": 600, "hash_ids": [0, i + 1]} for i in range(10)])) + "\n"
    )
    res = load_trace(p, limit=4)
    assert len(res.requests) == 4 and res.unique_blocks == 5
