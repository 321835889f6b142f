"""Scheduler and cost model: batching, budgets, queueing on a full cache, hits across turns."""

import pytest

from proxy.cachemodel.cost_model import CostModel
from proxy.simengine.engine import EngineConfig, EngineRequest, SimEngine

COST = CostModel(step_base_s=0.01, prefill_token_s=0.001, attn_token2_s=0.0, decode_seq_s=0.0)


def req(i, prompt, out=3, salt=None):
    return EngineRequest(i, list(prompt), list(range(1000, 1000 + out)), salt=salt)


def test_cost_model_defaults_are_llama8b_h100_like():
    c = CostModel()
    cold = c.prefill_s(2000)
    warm = c.prefill_s(2000, cached_tokens=1984)
    assert 0.10 < cold < 0.20  # ~15k prefill tokens/s
    assert warm < cold / 10
    assert c.step_s([], 0) == 0.0
    assert c.step_s([], 64) == pytest.approx(0.006 + 64 * 60e-6)
    with pytest.raises(ValueError):
        CostModel(prefill_token_s=-1)


def test_single_request_timeline_and_cached_tokens_cap():
    e = SimEngine(EngineConfig(block_size=4, capacity_blocks=64, cost=COST))
    a = e.submit(req(1, range(10, 26), out=3), 0.0)  # 16 tokens = 4 full blocks
    t = e.run_until_idle(0.0)
    assert a.first_token_at == pytest.approx(0.01 + 0.016)  # prefill step samples the first token
    assert a.finished_at == pytest.approx(a.first_token_at + 2 * 0.01) == t
    b = e.submit(req(2, range(10, 26), out=1), t)  # whole prompt cached: last block recomputed
    e.run_until_idle(t)
    assert b.cached_tokens == 12
    assert b.first_token_at - b.arrival == pytest.approx(0.01 + 0.004)
    assert (e.prompt_tokens_queried, e.prompt_tokens_hit) == (32, 12)


def test_token_budget_chunks_prefill_and_decode_first():
    e = SimEngine(EngineConfig(block_size=4, capacity_blocks=256, max_num_batched_tokens=10, cost=COST))
    a = e.submit(req(1, range(100, 125), out=2), 0.0)  # 25 tokens: chunks 10, 10, 5
    r1 = e.step(0.0)
    assert r1.prefill_tokens == 10 and not r1.emitted
    b = e.submit(req(2, range(200, 204), out=2), r1.end)
    r2 = e.step(r1.end)
    assert r2.prefill_tokens == 10 and b not in r2.admitted  # budget used up by a's chunk
    r3 = e.step(r2.end)
    assert r3.prefill_tokens == 9 and a in r3.emitted and b in r3.emitted and b in r3.admitted
    r4 = e.step(r3.end)
    assert r4.decode_rows == 2 and set(r4.finished) == {a, b}


def test_max_num_seqs_limits_running():
    e = SimEngine(EngineConfig(block_size=4, capacity_blocks=256, max_num_seqs=2, cost=COST))
    for i in range(3):
        e.submit(req(i, range(i * 100, i * 100 + 8)), 0.0)
    r = e.step(0.0)
    assert len(r.admitted) == 2 and len(e.waiting) == 1


def test_request_waits_when_cache_is_full_then_runs():
    e = SimEngine(EngineConfig(block_size=4, capacity_blocks=6, cost=COST))
    a = e.submit(req(1, range(16), out=4), 0.0)  # prefill needs 4 blocks
    b = e.submit(req(2, range(50, 62), out=2), 0.0)  # prefill needs 3 blocks, 2 free: must wait
    r = e.step(0.0)
    assert r.admitted == (a,) and list(e.waiting) == [b]
    e.run_until_idle(r.end)
    assert b.admitted_at >= a.finished_at and b.done
    with pytest.raises(ValueError):
        e.submit(req(3, range(40)), 0.0)  # can never fit


def test_generated_blocks_are_cached_for_the_next_turn():
    e = SimEngine(EngineConfig(block_size=4, capacity_blocks=64, cost=COST))
    prompt = list(range(10, 18))
    a = e.submit(EngineRequest(1, prompt, [1, 2, 3, 4, 5, 6]), 0.0)
    t = e.run_until_idle(0.0)
    nxt = prompt + [1, 2, 3, 4, 5, 6] + [7, 8, 9]  # next turn: history + new user text
    b = e.submit(EngineRequest(2, nxt, [1]), t)
    e.run_until_idle(t)
    assert a.done and b.cached_tokens == 12  # prompt blocks + one full generated block


def test_salt_isolates_and_abort_frees():
    e = SimEngine(EngineConfig(block_size=4, capacity_blocks=64, cost=COST))
    e.submit(req(1, range(16), salt="a"), 0.0)
    t = e.run_until_idle(0.0)
    b = e.submit(req(2, range(16), salt="b"), t)
    c = e.submit(req(3, range(16), salt="a"), t)
    e.run_until_idle(t)
    assert b.cached_tokens == 0 and c.cached_tokens == 12
    d = e.submit(req(4, range(300, 340), out=50), 10.0)
    e.step(10.0)
    assert e.pool.stats().held > 0
    e.abort(d, 10.5)
    assert e.pool.stats().held == 0 and not e.has_work


def test_ttft_grows_under_load():
    e = SimEngine(EngineConfig(block_size=16, capacity_blocks=4096))
    reqs = [e.submit(req(i, range(i * 5000, i * 5000 + 3000), out=20), 0.0) for i in range(8)]
    e.run_until_idle(0.0)
    ttfts = [r.first_token_at - r.arrival for r in reqs]
    assert ttfts == sorted(ttfts) and ttfts[-1] > 2 * ttfts[0]
