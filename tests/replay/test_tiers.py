"""The host tier in the replay: accounting per request, Belady per tier, report rows."""

import pytest

from proxy.cachemodel.cost_model import CostModel
from proxy.replay.runner import ReplaySettings, make_policy, replay, resume_mask, run_policy
from proxy.replay.tiers import LruHostTier, MinHostTier, resolve_cpu_capacity
from proxy.replay.traces import ReplayRequest
from proxy.replay.workloads import generate, preset

COST = CostModel()


def _req(t, hashes, **kw):
    return ReplayRequest(t=t, tenant="", block_hashes=tuple(hashes), block_tokens=(16,) * len(hashes), **kw)


def test_cpu_capacity_accepts_multiples_shares_and_blocks():
    assert resolve_cpu_capacity("4x", 100, 10_000) == 400
    assert resolve_cpu_capacity("20%", 100, 10_000) == 2000
    assert resolve_cpu_capacity(0.1, 100, 10_000) == 1000
    assert resolve_cpu_capacity("750", 100, 10_000) == 750
    assert resolve_cpu_capacity(None, 100, 10_000) == 0
    with pytest.raises(ValueError):
        resolve_cpu_capacity(-1, 100, 10)


def test_gpu_hits_host_loads_and_recompute_split_each_request():
    reqs = [_req(0.0, [1, 2, 10]), _req(1.0, [3, 4, 11]), _req(2.0, [1, 2, 5]), _req(3.0, [9])]
    rec = run_policy(make_policy("lru", ReplaySettings()), reqs, 3, COST, cpu_blocks=3)
    # GPU (3 blocks) lost [1, 2, 10] to [3, 4, 11]; so did the 3-block host tier (write-through of
    # every computed block): the third request's prefix is nowhere, nothing to load
    assert list(rec.hit_blocks) == [0, 0, 0, 0]
    assert list(rec.load_tokens) == [0, 0, 0, 0]
    rec = run_policy(make_policy("lru", ReplaySettings()), reqs, 3, COST, cpu_blocks=6)
    assert list(rec.load_tokens) == [0, 0, 32, 0]  # [1, 2] loaded, 5 recomputed
    s = rec.summary(3.0, 1.0)
    assert (s["gpu_hit_tokens"], s["host_load_tokens"], s["recompute_tokens"]) == (0, 32, 16 * 8)
    assert s["load_s"] == pytest.approx(COST.load_s(32))
    assert s["host_tier"]["loads"] == 2


def test_a_load_is_faster_than_the_recompute_it_replaces():
    reqs = [_req(0.0, range(1, 200)), _req(10.0, range(1000, 1200)), _req(20.0, range(1, 200))]
    no_tier = run_policy(make_policy("lru", ReplaySettings()), reqs, 200, COST)
    tier = run_policy(make_policy("lru", ReplaySettings()), reqs, 200, COST, cpu_blocks=800)
    # the engine recomputes a fully cached prompt's last block: 198 of its 199 blocks load
    assert tier.load_tokens[2] == 198 * 16 and no_tier.hit_tokens[2] == 0
    assert tier.ttft_by_request()[2] < no_tier.ttft_by_request()[2] / 5


def test_min_host_tier_loads_the_host_prefix_beyond_the_gpu_hit():
    lists = [[1, 2, 3], [4, 5, 6], [1, 2, 3]]
    t = MinHostTier(3, lists)
    assert t.hits == [0, 0, 3]
    assert [t.on_request(i, h, g) for i, (h, g) in enumerate(zip(lists, [0, 0, 1], strict=False))] == [0, 0, 2]
    lru = LruHostTier(3)
    assert [lru.on_request(i, h, 0) for i, h in enumerate(lists)] == [0, 0, 0]  # LRU kept [4, 5, 6]


def test_resume_mask_marks_requests_after_a_tool_call():
    reqs = [
        _req(0, [1], session_id="a", finish_reason="tool_calls"),
        _req(1, [2], session_id="b"),
        _req(2, [1, 3], session_id="a", finish_reason="stop"),
        _req(3, [4], session_id="a"),
    ]
    assert resume_mask(reqs).tolist() == [False, False, True, False]


def test_tiered_replay_bounds_and_report_rows():
    reqs = generate(preset("selector", sessions=20))
    out = replay(reqs, [600], ["lru", "scout-proxy", "belady"], ReplaySettings(cpu_capacity="4x"))
    row = out["capacities"][0]
    assert row["cpu_capacity_blocks"] == 2400
    lru, bel, scout = (row["policies"][n] for n in ("lru", "belady", "scout-proxy"))
    assert bel["recompute_tokens"] <= lru["recompute_tokens"]
    # Belady bounds GPU hits, not TTFT: on the engine model a host load and queueing move TTFT too
    assert bel["gpu_hit_tokens"] >= lru["gpu_hit_tokens"]
    for s in (lru, bel, scout):
        assert s["gpu_hit_tokens"] + s["host_load_tokens"] + s["recompute_tokens"] == s["prompt_tokens"]
    assert lru["host_load_tokens"] > 0
    assert scout["ttft_gap_closed"] is not None
    plain = replay(reqs, [600], ["lru"], ReplaySettings())["capacities"][0]["policies"]["lru"]
    assert plain["host_load_tokens"] == 0 and lru["ttft_mean_s"] < plain["ttft_mean_s"]
