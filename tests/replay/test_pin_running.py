"""`--pin-running`: running requests hold their blocks until their response, as in vLLM."""

from proxy.cachemodel.block_pool import BlockPool
from proxy.cachemodel.cost_model import CostModel
from proxy.replay.grouped_cache import GroupedCache
from proxy.replay.policies import admit
from proxy.replay.runner import ReplaySettings, make_policy, run_policy
from proxy.replay.traces import ReplayRequest


def test_admissible_counts_what_fits_beside_held_blocks():
    pool = BlockPool(4)
    assert pool.allocate("a", [1, 2, 3], 0.0) == 0  # held: one slot left
    assert pool.admissible([9, 8, 7]) == 1
    assert pool.admissible([1, 2, 9, 8]) == 3  # hits always fit, then one miss
    assert admit(pool, "b", [1, 2, 9, 8], 0.0) == 2
    assert pool.match_prefix([1, 2, 9]) == 3 and not pool.contains(8)  # the rest was not cached


def test_grouped_cache_never_evicts_held_blocks():
    cache = GroupedCache(4, lambda group, last, now: -now)
    cache.access([1, 2], ["g", "g"], 0.0)
    cache.hold("r1", [1, 2])
    cache.access([5, 6, 7], ["g"] * 3, 1.0)  # needs 3 slots, 2 are free: only 2 cached
    assert cache.match_prefix([1, 2]) == 2
    assert cache.match_prefix([5, 6, 7]) == 2
    cache.release("r1")
    cache.access([8, 9], ["g", "g"], 2.0)  # now the old blocks can go
    assert cache.match_prefix([8, 9]) == 2 and cache.match_prefix([1, 2]) < 2


def _req(t, hashes, out=200):
    return ReplayRequest(
        t=t, tenant="", block_hashes=tuple(hashes), block_tokens=(16,) * len(hashes), output_tokens=out
    )


def test_a_running_request_keeps_its_prefix_from_a_concurrent_one():
    """LRU at 6 blocks: A (4 blocks) is still decoding when B (4 new blocks) arrives; pinned, B can
    only cache 2 and A's prefix survives for its next turn C; unpinned, B evicts it."""
    reqs = [_req(0.0, [1, 2, 3, 4]), _req(0.01, [11, 12, 13, 14], out=1), _req(0.02, [11, 12, 13, 15], out=1)]
    reqs.append(_req(5.0, [1, 2, 3, 4, 5]))
    hits = {}
    for pin in (False, True):
        s = ReplaySettings(pin_running=pin)
        rec = run_policy(make_policy("lru", s), reqs, 6, CostModel())
        hits[pin] = rec.hit_blocks.tolist()
    assert hits[False][3] < 4  # request granularity: A's blocks were evicted
    assert hits[True][3] == 4
