"""Engine truth about a host tier: the sim's vLLM offloading metrics -> the core's reload price."""

import pytest

from proxy.engines.vllm import VllmAdapter
from proxy.runtime.reload_price import ReloadPrice
from proxy.runtime.scraper import EngineScraper
from proxy.simengine.engine import EngineRequest

from .conftest import sim_config
from .test_engine_truth import BASE, Scripted, runtime


def _sim_metrics_after_loads(**kw):
    """Drive a sim with a host tier in process (evict a prefix, bring it back) and read /metrics."""
    from prometheus_client import generate_latest

    from proxy.simengine.service import SimService

    svc = SimService(sim_config(capacity_blocks=40, cpu_blocks=400, **kw))
    eng = svc.engine
    texts = [generate_latest(svc.registry).decode()]
    t = 0.0
    for i, prompt in enumerate([range(400), range(1000, 1600), range(400), range(2000, 2600), range(400)]):
        eng.submit(EngineRequest(i, list(prompt), [1]), t)
        t = eng.run_until_idle(t)
        svc.metrics.refresh()
        texts.append(generate_latest(svc.registry).decode())
    return eng, texts


def test_vllm_adapter_reads_the_host_tier_from_the_sims_metrics():
    eng, texts = _sim_metrics_after_loads()
    snap = VllmAdapter(None, BASE).parse_metrics(texts[-1])
    assert snap.external_hits == eng.external_hit > 0
    assert snap.offload_load_bytes == eng.offload["CPU_to_GPU"][0]
    assert snap.offload_load_seconds == pytest.approx(eng.offload["CPU_to_GPU"][1])
    assert snap.host_tier_gib == pytest.approx(400 * 16 * 131072 / (1 << 30), rel=1e-5)


def test_older_vllm_offload_counters_with_transfer_type_are_read_too():
    text = (
        'vllm:external_prefix_cache_hits_total{model_name="m",engine="0"} 4096.0\n'
        'vllm:kv_offload_total_bytes_total{model_name="m",engine="0",transfer_type="CPU_to_GPU"} 100.0\n'
        'vllm:kv_offload_total_bytes_total{model_name="m",engine="0",transfer_type="GPU_to_CPU"} 900.0\n'
        'vllm:kv_offload_total_time_total{model_name="m",engine="0",transfer_type="CPU_to_GPU"} 0.5\n'
    )
    snap = VllmAdapter(None, BASE).parse_metrics(text)
    assert (snap.external_hits, snap.offload_load_bytes, snap.offload_load_seconds) == (4096.0, 100.0, 0.5)
    assert VllmAdapter(None, BASE).parse_metrics("vllm:num_requests_waiting 0\n").offload_load_bytes is None


def test_reload_price_from_scrape_deltas():
    eng, texts = _sim_metrics_after_loads()
    ad = VllmAdapter(None, BASE)
    price = ReloadPrice()
    for text in texts:
        price.add(ad.parse_metrics(text))
    cost = eng.config.cost
    assert price.tokens_per_s() == pytest.approx(1.0 / cost.transfer_s(1))  # 400 Gb/s of 128 KiB tokens
    assert price.bytes_per_token() == pytest.approx(131072)
    assert price.host_tokens() == 400 * 16
    assert ReloadPrice(host_tier_tokens=999).host_tokens() == 999  # the setting wins
    assert ReloadPrice().overrides() == {}  # nothing seen: recompute price


async def test_live_runtime_switches_the_planner_to_the_load_price():
    eng, texts = _sim_metrics_after_loads()
    ad = VllmAdapter(None, BASE)
    rt = runtime()
    assert rt.policy.host_residency is None and rt.policy.config.reload_tokens_per_s == 0
    rt.scraper = EngineScraper(Scripted([ad.parse_metrics(t) for t in texts]), None, on_snapshot=rt._on_snapshot)
    for _ in texts:
        await rt.scraper.scrape_once()
    cfg = rt.policy.config
    assert cfg.reload_tokens_per_s == pytest.approx(1.0 / eng.config.cost.transfer_s(1), rel=0.11)
    assert cfg.host_tier_tokens == 400 * 16 and rt.policy.planner.cfg is cfg
    assert rt.policy.host_residency is not None and rt.policy.host_residency.capacity_tokens == 400 * 16
    assert cfg.reload_s(10_000) < 10_000 / cfg.prefill_tokens_per_s / 10
    assert rt.reload.info()["seen_tier"]
