"""Hand-worked cases for the block pool: eviction order, ref counts, salt isolation, priority decay."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.cachemodel.block_hash import chain_hashes, extend_chain
from proxy.cachemodel.block_pool import BlockPool


def test_prefix_hit_and_stats():
    p = BlockPool(8)
    assert p.access([1, 2, 3], 0.0) == 0
    assert p.access([1, 2, 4], 1.0) == 2
    assert p.access([9, 2, 3], 2.0) == 0  # chained: block 2 after a different block 0 is no hit
    s = p.stats()
    assert (s.queries, s.hits) == (9, 2)
    assert p.match_prefix([1, 2, 3, 5]) == 3


def test_finished_request_tail_evicted_before_prefix():
    p = BlockPool(4)
    p.access([1, 2, 3, 4], 0.0)
    assert p.eviction_order() == [4, 3, 2, 1]  # deepest first: tail goes first
    p.access([5], 1.0)  # needs one slot: evicts block 4
    assert p.match_prefix([1, 2, 3, 4]) == 3
    assert not p.contains(4)


def test_lru_across_requests():
    p = BlockPool(4)
    p.access([1, 2], 0.0)
    p.access([3, 4], 1.0)
    p.access([1, 2], 2.0)  # touch: 1,2 become most recent
    p.access([5, 6], 3.0)  # evicts 4 then 3
    assert p.match_prefix([1, 2]) == 2
    assert p.match_prefix([3]) == 0
    assert p.stats().evictions == 2


def test_held_blocks_are_never_evicted_and_full_pool_refuses():
    p = BlockPool(4)
    assert p.allocate("a", [1, 2, 3], 0.0) == 0
    assert p.allocate("b", [7, 8], 0.0) is None  # needs 2, only 1 free: refused, nothing changed
    assert p.stats().held == 3
    assert p.allocate("c", [1, 2, 9], 0.0) == 2  # shares held 1,2 (ref 2), takes the last slot
    assert p.allocate("d", [5], 0.0) is None
    p.free("a", 1.0)  # 3 becomes free; 1,2 still held by c
    assert p.eviction_order() == [3]
    assert p.allocate("d", [5], 2.0) == 0  # evicts 3, not 1/2
    assert p.match_prefix([1, 2, 3]) == 2
    p.free("c", 3.0)
    assert p.eviction_order() == [9, 2, 1]


def test_request_cannot_evict_its_own_hits():
    p = BlockPool(3)
    p.access([1, 2, 3], 0.0)  # free queue: 3, 2, 1
    assert p.allocate("r", [1, 2, 4], 1.0) == 2  # 1,2 pinned first, so 4 evicts 3
    assert p.match_prefix([1, 2]) == 2 and not p.contains(3)


def test_max_hit_blocks_caps_reported_hit():
    p = BlockPool(8)
    p.access([1, 2], 0.0)
    assert p.allocate("r", [1, 2], 1.0, max_hit_blocks=1) == 1
    assert p.stats().hits == 1


def test_tail_hashes_label_decode_blocks():
    p = BlockPool(8)
    assert p.allocate("r", [1, 2], 0.0, extra_blocks=2) == 0
    assert p.stats().held == 4
    p.free("r", 1.0, tail_hashes=[3])  # one generated block filled; one stays unhashed
    assert p.match_prefix([1, 2, 3]) == 3
    assert p.stats().cached == 3


def test_reset_refuses_while_held():
    p = BlockPool(4)
    p.allocate("r", [1], 0.0)
    assert p.reset() is False
    p.free("r", 1.0)
    assert p.reset() is True
    assert p.match_prefix([1]) == 0 and p.free_slots() == 4


def test_salt_isolation_and_chain_prefix():
    toks = list(range(100))
    a = chain_hashes(toks, 16)
    assert len(a) == 6  # 100 // 16 full blocks; partial tail not hashed
    b = chain_hashes(toks[:40] + [999] * 60, 16)
    assert a[:2] == b[:2] and a[2] != b[2]
    s1 = chain_hashes(toks, 16, salt="agent-1")
    s2 = chain_hashes(toks, 16, salt="agent-2")
    assert not set(a) & set(s1) and not set(s1) & set(s2)
    assert chain_hashes(toks, 16, salt="agent-1") == s1
    assert extend_chain(a[:3], toks, 16) == a
    p = BlockPool(32)
    p.access(s1, 0.0)
    assert p.match_prefix(a) == 0 and p.match_prefix(s2) == 0 and p.match_prefix(s1) == 6


def test_priority_evicts_low_priority_first():
    p = BlockPool(4, eviction="priority", retention_seconds=100.0)
    p.access([1, 2], 0.0, priority=5)
    p.access([3, 4], 1.0, priority=0)
    p.access([5, 6], 2.0)  # LRU would evict 2,1; priority evicts 4,3
    assert p.match_prefix([1, 2]) == 2 and not p.contains(3) and not p.contains(4)


def test_priority_decays_after_retention():
    p = BlockPool(4, eviction="priority", retention_seconds=10.0)
    p.access([1, 2], 0.0, priority=5)
    p.access([3, 4], 1.0, priority=0)
    p.access([5, 6], 20.0)  # 1,2 idle 20s > 10s: back to 0, and older than 3,4
    assert p.match_prefix([3, 4]) == 2 and not p.contains(1) and not p.contains(2)
    assert p.eviction_order(20.0) == [4, 3, 6, 5]


def test_priority_mode_with_default_priority_matches_lru():
    seqs = [[1, 2, 3], [1, 2, 4], [5, 6], [1, 7], [5, 6, 8, 9], [1, 2, 3, 10], [11]]
    lru, pr = BlockPool(5), BlockPool(5, eviction="priority")
    for t, s in enumerate(seqs):
        assert lru.access(s, float(t)) == pr.access(s, float(t))
        assert lru.eviction_order() == pr.eviction_order(float(t))


def test_request_longer_than_pool():
    p = BlockPool(3)
    assert p.access([1, 2, 3, 4, 5], 0.0) == 0
    assert p.match_prefix([1, 2, 3, 4, 5]) == 3


@pytest.mark.parametrize("bad", [{"capacity_blocks": -1}, {"capacity_blocks": 4, "eviction": "fifo"}])
def test_bad_config(bad):
    with pytest.raises(ValueError):
        BlockPool(**bad)


def _chains(draw_lists):
    """Turn lists of small ints into chained ids: equal id at i <=> equal prefix up to i."""
    table: dict = {}
    out = []
    for lst in draw_lists:
        ids, parent = [], None
        for x in lst:
            parent = table.setdefault((parent, x), len(table) + 1)
            ids.append(parent)
        out.append(ids)
    return out


@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1, max_size=40), st.integers(1, 12))
@settings(max_examples=60, deadline=None)
def test_fast_access_equals_allocate_free_and_priority_zero(seqs, cap):
    fast, slow, prio = BlockPool(cap), BlockPool(cap), BlockPool(cap, eviction="priority")
    for t, ids in enumerate(_chains(seqs)):
        ids = ids[:cap]
        h1 = fast.access(ids, float(t))
        h2 = slow.allocate(("r", t), ids, float(t))
        slow.free(("r", t), float(t))
        h3 = prio.access(ids, float(t))
        assert h1 == h2 == h3
        assert fast.eviction_order() == slow.eviction_order() == prio.eviction_order(float(t))
        s = fast.stats()
        assert s.used <= cap and s.held == 0 and s.cached == len(fast.eviction_order())
    assert fast.stats() == slow.stats()
