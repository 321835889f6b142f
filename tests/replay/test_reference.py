"""LRU and Belady reproduce the Mooncake reference figures in ../shared/traces/README.md (±0.002),
and Belady is a bound on small random streams."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.cachemodel.block_pool import BlockPool
from proxy.replay.belady import INF, belady_hits, next_uses

# (share of unique blocks, LRU, Belady) from ../shared/traces/README.md
CONVERSATION = [
    (0.01, 0.052, 0.246),
    (0.05, 0.196, 0.366),
    (0.10, 0.279, 0.366),
    (0.25, 0.353, 0.366),
    (None, 0.366, 0.366),
]
SYNTHETIC = [
    (0.01, 0.038, 0.185),
    (0.05, 0.157, 0.396),
    (0.10, 0.262, 0.506),
    (0.25, 0.444, 0.626),
    (None, 0.640, 0.640),
]


def _rates(res, share):
    lists = [r.block_hashes for r in res.requests]
    total = sum(len(x) for x in lists)
    cap = res.unique_blocks if share is None else round(share * res.unique_blocks)
    pool = BlockPool(cap)
    lru = sum(pool.access(h, 0.0) for h in lists)
    return lru / total, sum(belady_hits(lists, cap)) / total


@pytest.mark.parametrize("share,lru,bel", CONVERSATION)
def test_conversation_trace_matches_reference(mooncake_conversation, share, lru, bel):
    res = mooncake_conversation
    assert len(res.requests) == 12031 and res.malformed == 0 and res.unique_blocks == 182790
    got_lru, got_bel = _rates(res, share)
    assert got_lru == pytest.approx(lru, abs=0.002)
    assert got_bel == pytest.approx(bel, abs=0.002)


@pytest.mark.parametrize("share,lru,bel", SYNTHETIC)
def test_synthetic_trace_matches_reference(mooncake_synthetic, share, lru, bel):
    res = mooncake_synthetic
    assert len(res.requests) == 3993 and res.unique_blocks == 43924
    got_lru, got_bel = _rates(res, share)
    assert got_lru == pytest.approx(lru, abs=0.002)
    assert got_bel == pytest.approx(bel, abs=0.002)


def test_next_uses_points_at_the_next_request_naming_the_block():
    assert next_uses([(1, 2), (1,), (2, 3), (1,)]) == [[1, 2], [3], [INF, INF], [INF]]


def test_belady_bypasses_blocks_never_used_again_and_keeps_the_soonest():
    # capacity 2: A(1,2) then B(3,4) once, then A again: MIN keeps 1,2 and bypasses 3,4
    hits = belady_hits([(1, 2), (3, 4), (1, 2)], 2)
    assert hits == [0, 0, 2]
    pool = BlockPool(2)
    assert [pool.access(h, 0.0) for h in [(1, 2), (3, 4), (1, 2)]] == [0, 0, 0]


def test_belady_evicts_the_deeper_block_on_a_tie():
    # 1 and 2 are both next used by request 3; only one fits with 5: the prefix block must stay
    hits = belady_hits([(1, 2), (5,), (5,), (1, 2)], 2)
    assert hits[3] == 1


def _chains(rng, n_req, n_roots):
    reqs, ids = [], {}
    for _ in range(n_req):
        root = rng.randrange(n_roots)
        depth = rng.randint(1, 6)
        chain = []
        for d in range(depth):
            key = (root, d, rng.random() < 0.15 and d > 0)  # sometimes a branch
            chain.append(ids.setdefault((tuple(chain), key), len(ids)))
        reqs.append(tuple(chain))
    return reqs


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), cap=st.integers(1, 24))
def test_belady_is_at_least_lru_and_at_most_infinite(seed, cap):
    reqs = _chains(random.Random(seed), 60, 8)
    pool = BlockPool(cap)
    lru = sum(pool.access(r, 0.0) for r in reqs)
    bel = sum(belady_hits(reqs, cap))
    inf = sum(belady_hits(reqs, 10_000))
    assert lru <= bel <= inf
