"""The host-memory (CPU offload) tier: LRU bookkeeping, loads instead of prefill, metrics, /lookup."""

import pytest

from proxy.cachemodel.block_hash import chain_hashes
from proxy.cachemodel.cost_model import CostModel
from proxy.cachemodel.host_tier import HostTier
from proxy.engines.lmcache import LmcacheClient
from proxy.simengine.engine import EngineConfig, EngineRequest, SimEngine

from .conftest import make_client

# 1 ms per prefill token, 1 KB of KV per token over 8 Gb/s (= 1 µs/token), 5 ms per load
COST = CostModel(
    step_base_s=0.01,
    prefill_token_s=0.001,
    attn_token2_s=0.0,
    decode_seq_s=0.0,
    kv_bytes_per_token=1000,
    offload_gbps=8.0,
    offload_latency_s=0.005,
)


def req(i, prompt, out=1):
    return EngineRequest(i, list(prompt), list(range(1000, 1000 + out)))


def engine(gpu=8, cpu=16):
    return SimEngine(EngineConfig(block_size=4, capacity_blocks=gpu, cost=COST, cpu_blocks=cpu))


# ---------------------------------------------------------------------------- HostTier alone
def test_tier_is_an_lru_refreshed_by_store_and_load():
    t = HostTier(3)
    assert t.store(["a", "b", "c"]) == 3
    assert t.eviction_order() == ["a", "b", "c"]
    assert t.store(["a"]) == 0  # present: refreshed, not written again
    assert t.eviction_order() == ["b", "c", "a"]
    t.load(["b"])
    assert t.eviction_order() == ["c", "a", "b"]
    assert t.store(["d"]) == 1  # full: the least recent goes
    assert "c" not in t and t.eviction_order() == ["a", "b", "d"]
    st = t.stats()
    assert (st.stores, st.loads, st.evictions, st.used) == (4, 1, 1, 3)
    assert st.usage == 1.0


def test_tier_lookup_counts_the_run_after_the_gpu_hit():
    t = HostTier(8)
    t.store(["a", "b", "d"])
    assert t.lookup(["a", "b", "c", "d"], start=0) == 2  # stops at the first absent block
    assert t.lookup(["a", "b", "c", "d"], start=1, stop=2) == 1
    assert (t.lookups, t.hits) == (5, 3)
    assert t.match(["x", "a"]) == 0


def test_pinned_blocks_survive_eviction_and_a_fully_pinned_tier_stores_nothing():
    t = HostTier(2)
    t.store(["a", "b"])
    assert t.pin(["a", "zz"]) == 1
    t.store(["c"])
    assert "a" in t and "b" not in t
    t.pin(["c"])
    assert t.store(["d"]) == 0 and "d" not in t
    t.unpin(["a"])
    assert t.store(["d"]) == 1 and "a" not in t


# ---------------------------------------------------------------------------- engine
def test_evicted_prefix_is_loaded_not_prefilled_and_cached_tokens_include_it():
    e = engine(gpu=8, cpu=16)
    a = e.submit(req(1, range(10, 26)), 0.0)  # 4 full blocks, written through
    t = e.run_until_idle(0.0)
    assert e.host.stats().stores == 4 and a.loaded_tokens == 0
    e.submit(req(2, range(100, 132)), t)  # 8 blocks: evicts A from the 8-block GPU pool
    t = e.run_until_idle(t)
    assert e.pool.match_prefix(a.hashes) == 0 and e.host.match(a.hashes) == 4
    b = e.submit(req(3, range(10, 26)), t)
    t2 = e.run_until_idle(t)
    # GPU hit 0; 3 blocks loaded (the last prompt token is always recomputed), 4 tokens prefilled
    assert (b.cached_tokens, b.loaded_tokens) == (12, 12)
    load = 0.005 + 12 * 1000 * 8 / 8e9
    assert b.first_token_at - b.arrival == pytest.approx(load + 0.01 + 0.004)
    assert b.first_token_at == t2
    assert e.external_hit == 12 and e.prompt_tokens_hit == 0
    assert e.offload["CPU_to_GPU"][0] == 12 * 1000
    # a cold prefill of the same prompt would have cost 16 tokens of prefill
    assert b.first_token_at - b.arrival < 0.01 + 0.016


def test_loading_request_does_not_hold_up_others():
    e = engine(gpu=16, cpu=32)
    e.submit(req(1, range(10, 42)), 0.0)  # 8 blocks
    t = e.run_until_idle(0.0)
    e.submit(req(2, range(200, 240)), t)  # 10 blocks: evicts most of request 1
    t = e.run_until_idle(t)
    slow = e.submit(req(3, range(10, 42)), t)  # loads from the host tier
    other = e.submit(req(4, range(500, 504)), t)  # one block, nothing to load
    e.run_until_idle(t)
    assert slow.loaded_tokens > 0
    assert other.first_token_at < slow.first_token_at  # ran while the load was in flight


def test_eviction_order_across_tiers():
    """GPU and host tier each evict their own least recently used blocks; a block gone from the GPU
    but kept by the host is a load, one gone from both is recomputed."""
    e = engine(gpu=4, cpu=6)
    p1, p2, p3 = range(8), range(100, 108), range(200, 208)  # 2 full blocks each (+ 1 last token)
    for i, p in enumerate((p1, p2, p3)):
        e.submit(req(i, [*list(p), 9]), 0.0)
        e.run_until_idle(0.0)
    h = [chain_hashes([*list(p), 9], 4) for p in (p1, p2, p3)]
    assert e.pool.match_prefix(h[0]) == 0 and e.pool.match_prefix(h[2]) == 2  # GPU: p1 went first
    assert all(e.host.match(x) == 2 for x in h)  # host holds all three
    e.submit(req(10, range(300, 316)), 0.0)  # 4 new full blocks
    e.run_until_idle(0.0)
    assert e.host.match(h[0]) == 0 and e.host.match(h[1]) == 0  # host LRU: p1, p2 out
    assert e.host.match(h[2]) == 2
    r1 = e.submit(req(20, [*list(p1), 9]), 1.0)
    e.run_until_idle(1.0)
    assert (r1.cached_tokens, r1.loaded_tokens) == (0, 0)  # recomputed
    e2 = engine(gpu=4, cpu=6)
    for i, p in enumerate((p1, p2, p3)):
        e2.submit(req(i, [*list(p), 9]), 0.0)
        e2.run_until_idle(0.0)
    r = e2.submit(req(5, [*list(p1), 9]), 1.0)
    e2.run_until_idle(1.0)
    assert (r.cached_tokens, r.loaded_tokens) == (8, 8)  # loaded


def test_no_host_tier_means_no_loads():
    e = engine(gpu=8, cpu=0)
    assert e.host is None
    a = e.submit(req(1, range(10, 26)), 0.0)
    t = e.run_until_idle(0.0)
    e.submit(req(2, range(100, 132)), t)
    t = e.run_until_idle(t)
    b = e.submit(req(3, range(10, 26)), t)
    e.run_until_idle(t)
    assert b.cached_tokens == 0 and b.loaded_tokens == 0 and a.loaded_tokens == 0


# ---------------------------------------------------------------------------- HTTP surface
def _value(text: str, name: str, **labels) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not exported")


async def _chat(c, text):
    r = await c.post(
        "/v1/chat/completions",
        json={"model": "sim-llama-3.1-8b", "max_tokens": 1, "messages": [{"role": "user", "content": text}]},
    )
    assert r.status_code == 200, r.text
    return r.json()["usage"]


async def test_metrics_and_usage_follow_vllm_offloading_names():
    c = make_client(capacity_blocks=24, cpu_blocks=400, output_tokens=1)
    try:
        first = "alpha " * 200
        await _chat(c, first)
        await _chat(c, "beta " * 300)  # 20 blocks: evicts most of the first prompt
        again = await _chat(c, first)
        cached = again["prompt_tokens_details"]["cached_tokens"]
        eng = c.sim.engine
        assert eng.external_hit > 0 and cached == eng.prompt_tokens_hit + eng.external_hit
        m = (await c.get("/metrics")).text
        assert _value(m, "vllm:external_prefix_cache_hits_total") == eng.external_hit
        assert (
            _value(m, "vllm:external_prefix_cache_queries_total") == eng.prompt_tokens_queried - eng.prompt_tokens_hit
        )
        assert _value(m, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == eng.external_hit
        assert _value(m, "vllm:prompt_tokens_cached_total") == cached
        assert _value(m, "vllm:prefix_cache_hits_total") == eng.prompt_tokens_hit
        assert _value(m, "vllm:prompt_tokens_by_source_total", source="local_cache_hit") == eng.prompt_tokens_hit
        assert _value(m, "vllm:kv_offload_total_bytes_total", transfer_type="CPU_to_GPU") == eng.external_hit * 131072
        assert _value(m, "vllm:kv_offload_total_bytes_total", transfer_type="GPU_to_CPU") > 0
        assert _value(m, "vllm:kv_offload_total_time_total", transfer_type="CPU_to_GPU") > 0
        assert _value(m, "vllm:kv_offload_load_bytes_total") == eng.external_hit * 131072
        assert _value(m, "vllm:kv_offload_store_bytes_total") == _value(
            m, "vllm:kv_offload_total_bytes_total", transfer_type="GPU_to_CPU"
        )
        assert _value(m, "vllm:kv_offload_load_time_total") > 0
        st = eng.host.stats()
        plain = {
            line.split()[0]: float(line.split()[1]) for line in m.splitlines() if line.startswith("cachescout_sim_host")
        }
        assert plain["cachescout_sim_host_hit_blocks_total"] == st.hits > 0
        assert plain["cachescout_sim_host_lookup_blocks_total"] == st.lookups
        assert _value(m, "vllm:kv_offload_cpu_cache_usage_perc") == pytest.approx(st.usage)
    finally:
        await c.sim.close()
        await c.aclose()


async def test_sim_without_tier_has_no_lookup_route_and_no_offload_metrics():
    c = make_client()
    try:
        assert (await c.post("/lookup", json={"tokens": [1, 2]})).status_code == 404
        m = (await c.get("/metrics")).text
        assert "vllm:kv_offload" not in m and "vllm:external_prefix_cache" not in m
    finally:
        await c.sim.close()
        await c.aclose()


async def test_lmcache_client_reads_host_residency_and_pins_on_the_sim():
    c = make_client(capacity_blocks=64, cpu_blocks=256, output_tokens=1)
    try:
        toks = list(range(1, 101))  # 6 full blocks of 16 (+4 tokens)
        r = await c.post("/v1/completions", json={"model": "sim-llama-3.1-8b", "prompt": toks, "max_tokens": 1})
        assert r.status_code == 200, r.text
        lm = LmcacheClient(c, "http://sim")
        assert await lm.lookup(toks) == {"sim-0": 96}
        assert await lm.lookup([7] * 40) == {"sim-0": 0}
        assert await lm.maybe_pin(toks, priority=90) is True
        assert c.sim.engine.host.stats().pinned == 6 and lm.disabled is None
    finally:
        await c.sim.close()
        await c.aclose()
