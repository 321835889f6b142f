"""Per-signal bookkeeping: conversion, lead time and yield follow the blocks an action touched."""

import numpy as np
import pytest

from proxy.cachemodel.block_pool import BlockPool
from proxy.cachemodel.cost_model import CostModel
from proxy.cachemodel.policy_pool import PolicyPool, ScoredEvictor
from proxy.replay.measure import RunRecorder

COST = CostModel()


def execute_on_pool(pool, rec, cost, now, kind, reason, hashes, tokens):
    """A touch/warm applied to a bare pool and recorded as the engine driver records it."""
    before = pool.match_prefix(hashes)
    cached = sum(tokens[:before])
    pool.access(hashes, now)
    after = pool.match_prefix(hashes)
    warmed = sum(tokens[before:after])
    service = cost.chunk_s(cached, max(warmed, 1)) + cost.decode_seq_s
    rec.action(now, kind, reason, hashes, tokens, before, after, cached, warmed, service)


def _rec(n=4):
    return RunRecorder(COST, np.zeros(n, dtype=np.int64))


def test_a_warm_that_serves_a_hit_converts_with_its_lead_time():
    rec, pool = _rec(), BlockPool(8)
    execute_on_pool(pool, rec, COST, 1.0, "warm", "transition", (1, 2, 3), (16, 16, 16))
    hit = pool.access((1, 2, 3, 4), 3.5)
    rec.request(0, 3.5, (1, 2, 3, 4), (16, 16, 16, 16), hit)
    s = rec.signal_summary(0.0)["transition"]
    assert hit == 3
    assert s["acted_tokens"] == 48 and s["warm_tokens"] == 48 and s["converted_tokens"] == 48
    assert s["conversion"] == 1.0 and s["lead_p50_s"] == pytest.approx(2.5)
    assert s["saved_s"] == pytest.approx(48 * COST.prefill_token_s)
    assert s["cost_s"] > 0 and s["yield_s"] == pytest.approx(s["saved_s"] - s["cost_s"])


def test_a_warm_evicted_before_use_does_not_convert():
    rec, pool = _rec(), BlockPool(3)
    execute_on_pool(pool, rec, COST, 0.0, "warm", "fanout", (1, 2), (16, 16))
    pool.access((7, 8, 9), 1.0)  # flushes the warmed blocks
    rec.request(0, 1.0, (7, 8, 9), (16, 16, 16), 0)
    hit = pool.access((1, 2), 2.0)
    rec.request(1, 2.0, (1, 2), (16, 16), hit)
    s = rec.signal_summary(0.0)["fanout"]
    assert hit == 0 and s["converted_tokens"] == 0 and s["conversion"] == 0.0


def test_a_touch_on_resident_blocks_costs_one_token_and_rewarming_voids_stale_marks():
    rec, pool = _rec(), BlockPool(4)
    pool.access((1, 2), 0.0)
    execute_on_pool(pool, rec, COST, 0.5, "touch", "hint", (1, 2), (16, 16))
    s = rec.signals["hint"]
    assert s.warm_tokens == 0 and s.cost_s == pytest.approx(COST.chunk_s(32, 1) + COST.decode_seq_s)
    pool.access((5, 6, 7, 8), 1.0)  # evicts 1, 2 without a request naming them
    execute_on_pool(pool, rec, COST, 2.0, "warm", "transition", (1, 2), (16, 16))
    hit = pool.access((1, 2), 3.0)
    rec.request(0, 3.0, (1, 2), (16, 16), hit)
    sig = rec.signal_summary(0.0)
    assert sig["hint"]["converted_tokens"] == 0  # its blocks were evicted in between
    assert sig["transition"]["converted_tokens"] == 32


def test_pollution_is_lost_hits_against_lru_shared_by_acted_tokens():
    lru, pol = _rec(2), _rec(2)
    for rec, hits in ((lru, (2, 2)), (pol, (0, 2))):
        for i, h in enumerate(hits):
            rec.request(i, float(i), (1, 2), (16, 16), h)
    pool = BlockPool(4)
    execute_on_pool(pool, pol, COST, 0.0, "warm", "transition", (9,), (16,))
    out = pol.summary(span_s=1.0, budget_s=1.0, lru=lru)
    assert out["pollution_s"] == pytest.approx(32 * COST.prefill_token_s)
    assert out["signals"]["transition"]["pollution_s"] == pytest.approx(out["pollution_s"])


def test_ttft_queue_and_throughput_at_budget():
    rec = _rec(3)
    for i in range(3):
        rec.request(i, 0.0, (i,), (1000,), 0)  # three cold prefills arriving together
    _, ttft = rec._queue()
    one = COST.prefill_s(1000)
    assert ttft == pytest.approx([one, 2 * one, 3 * one])
    rec2 = _rec(3)
    for i in range(3):
        rec2.request(i, float(i), (i,), (1000,), 0)
    tp = rec2.throughput_at_budget(span_s=2.0, budget_s=2 * one)
    # the third request's TTFT (3·one − 2g at arrival gap g) reaches the budget near g = one/2,
    # i.e. at 3 requests per 2g seconds
    assert 2.5 / one < tp < 3.2 / one


def test_scored_evictor_takes_the_lowest_scored_group_head_and_unlabelled_blocks_first():
    score = {"keep": 10.0, "drop": 0.0}
    groups = {1: "keep", 2: "keep", 3: "drop", 4: "drop", 5: "keep"}
    ev = ScoredEvictor(lambda g, last, now: score[g], groups.get)
    pool = PolicyPool(4, ev)
    pool.access((1, 2), 0.0)
    pool.access((3, 4), 1.0)
    pool.access((5,), 2.0)  # evicts 4: the "drop" group's head (deepest block freed first)
    assert pool.match_prefix((3, 4)) == 1 and pool.match_prefix((1, 2)) == 2
    pool.access((9,), 3.0)  # 9 has no group: evicted first next time, then "drop" again
    pool.access((6,), 4.0)
    assert pool.match_prefix((9,)) == 0 and pool.match_prefix((1, 2)) == 2 and len(ev) == 4


def test_scored_evictor_rescores_when_its_version_changes():
    score = {"a": 0.0, "b": 1.0}
    ev = ScoredEvictor(lambda g, last, now: score[g], {1: "a", 2: "b", 3: "a", 4: "b"}.get)
    pool = PolicyPool(2, ev)
    pool.access((1,), 0.0)
    pool.access((2,), 0.0)
    pool.access((3,), 1.0)  # evicts 1 ("a" scores lower)
    assert pool.match_prefix((2,)) == 1
    score["a"], score["b"] = 1.0, 0.0
    ev.version += 1
    pool.access((4,), 1.0)  # same `now`, new statistics: evicts 2 ("b" now lower)
    assert pool.match_prefix((2,)) == 0 and pool.match_prefix((3,)) == 1


def test_early_share_compares_lead_time_with_the_actions_prefill_time():
    rec, pool = _rec(), BlockPool(256)
    chain, toks = tuple(range(1, 101)), (16,) * 100  # 1600 tokens: ~0.11 s to prefill
    need = COST.chunk_s(0, 1600)
    execute_on_pool(pool, rec, COST, 0.0, "warm", "transition", chain, toks)
    rec.request(0, need / 2, chain, toks, pool.access(chain, need / 2))  # too soon to have helped
    execute_on_pool(pool, rec, COST, 10.0, "touch", "hint", chain, toks)
    rec.request(1, 10.0 + 2 * need, chain, toks, pool.access(chain, 10.0 + 2 * need))
    sig = rec.signal_summary(0.0)
    assert sig["transition"]["early_share"] == 0.0 and sig["transition"]["conversion"] == 1.0
    assert sig["hint"]["early_share"] == 1.0


def test_parallel_engines_share_the_queue():
    rec = RunRecorder(COST, np.zeros(4, dtype=np.int64), engines=2)
    for i in range(4):
        rec.request(i, 0.0, (i,), (1000,), 0)
    one = COST.prefill_s(1000)
    assert sorted(rec._queue()[1]) == pytest.approx([one, one, 2 * one, 2 * one])
