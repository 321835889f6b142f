"""The Claude Code live driver (`proxy.bench.claude_code_live`, `cachescout bench claude-code`): hash ids
become 64-token texts, sessions become chat requests whose rendered prompts share exactly the
prefixes the trace's hash ids share, and a tiny draw of the shipped sessions runs over real sockets
straight to the simulated engine and through the proxy with no error and no byte changed.
Correctness only; the timing figures are the benchmark's (benchmarks/claude_code_live.py)."""

import json

import pytest

from proxy.bench.claude_code_live import TOOLS, BlockTexts, block_text, messages, plan, scaled_policy
from proxy.cli import main
from proxy.core.config import PolicyConfig
from proxy.demo.scenes import CLAUDE_CODE_DATA
from proxy.replay.claude_code import BLOCK_SIZE, compose, load
from proxy.simengine.chat_template import render_chat
from proxy.simengine.tokenizer import SimTokenizer


def test_a_block_is_64_sim_tokens_and_the_same_id_gives_the_same_text():
    tok = SimTokenizer()
    for block_id in (0, 1, 7 << 32 | 3, 2**40 + 12345):
        assert len(tok.encode(block_text(block_id))) == BLOCK_SIZE
        assert block_text(block_id) == block_text(block_id)
    assert block_text(1) != block_text(2)
    # blocks concatenate without merging tokens: n blocks are n x 64 tokens
    texts = BlockTexts()
    assert len(tok.encode(texts.join([5, 6, 7]))) == 3 * BLOCK_SIZE


def _rendered(req, texts, tok):
    return tok.encode(render_chat(messages(req, texts), TOOLS, True))


def test_requests_share_the_prefixes_their_hash_ids_share():
    comp = compose(load(CLAUDE_CODE_DATA).files, users=4, window=30, horizon=250, seed=0)
    sessions = plan(comp)
    assert sum(len(v) for v in sessions.values()) == len(comp.requests)
    tok, texts = SimTokenizer(), BlockTexts()
    by_session = {}
    for rr in comp.requests:
        by_session.setdefault(rr.session_id, []).append(rr.block_hashes)
    checked = resumes = 0
    for sid, reqs in sessions.items():
        prev_ids, prev_tokens = None, None
        for req, ids in zip(reqs, by_session[sid], strict=True):
            assert req.prompt_blocks == len(ids)
            tokens = _rendered(req, texts, tok)
            # ~64 tokens a block, plus the template's few tokens per message
            assert len(ids) * BLOCK_SIZE <= len(tokens) <= len(ids) * BLOCK_SIZE * 1.05 + 200
            if prev_ids is not None:
                common = 0
                while common < min(len(ids), len(prev_ids)) and ids[common] == prev_ids[common]:
                    common += 1
                shared = 0
                while shared < min(len(tokens), len(prev_tokens)) and tokens[shared] == prev_tokens[shared]:
                    shared += 1
                assert shared >= common * BLOCK_SIZE  # every shared block is a shared token prefix
                checked += 1
            if req.resumed:
                resumes += 1
                roles = [m["role"] for m in messages(req, texts)]
                assert roles[0] == "system" and "tool" in roles
            prev_ids, prev_tokens = ids, tokens
    assert checked > 20 and resumes > 20


def test_time_scale_scales_the_proxy_timers():
    base = PolicyConfig()
    got = scaled_policy(0.1)
    assert got["cooldown_s"] == pytest.approx(base.cooldown_s * 0.1)
    assert got["continuation_horizon_s"] == pytest.approx(base.continuation_horizon_s * 0.1)
    assert got["prefill_tokens_per_s"] == pytest.approx(base.prefill_tokens_per_s * 10)
    assert scaled_policy(1.0) == {}
    PolicyConfig(**got)  # every override is a real field


@pytest.mark.sockets
def test_bench_runs_a_tiny_draw_direct_and_through_the_proxy_with_no_byte_changed(tmp_path, capsys):
    out = tmp_path / "bench.json"
    rc = main(
        [
            "bench",
            "claude-code",
            "--trace",
            str(CLAUDE_CODE_DATA),
            "--users",
            "2",
            "--window",
            "5",
            "--horizon",
            "40",
            "--seed",
            "1",
            "--time-scale",
            "0.1",
            "--arms",
            "direct,proxy,passthrough",
            "--verify-bytes",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    assert "prefix hit rate" in capsys.readouterr().out
    rep = json.loads(out.read_text())
    planned = len(compose(load(CLAUDE_CODE_DATA).files, users=2, window=5, horizon=40, seed=1).requests)
    for name in ("direct", "proxy", "passthrough"):
        arm = rep["arms"][name]
        assert arm["errors"] == 0 and arm["requests"] == planned
        assert arm["tool_resumes"] > 0 and arm["ttft_mean_s"] > 0
        # a session's later requests hit on its earlier ones (the fixed head and the history)
        assert 0.3 < arm["hit_rate"] < 1
    # the same requests went to identical engines on every arm
    assert rep["arms"]["direct"]["prompt_tokens"] == rep["arms"]["proxy"]["prompt_tokens"]
    for name in ("proxy", "passthrough"):
        assert rep["arms"][name]["middle_cpu_s"] > 0 and rep["arms"][name]["middle_rss_peak_mb"] > 0
    assert rep["bytes"] == {"sent": planned, "received": rep["bytes"]["received"], "changed_or_missing": 0, "ok": True}
    assert rep["bytes"]["received"] >= planned
