"""Engine truth into the core: capacity, restarts, waiting queue, and the prefill-rate warmup budget."""

import pytest

from proxy.engines.base import EngineSnapshot
from proxy.engines.sglang import SglangAdapter
from proxy.engines.vllm import VllmAdapter
from proxy.harness.proxy_server import run_proxy_server
from proxy.harness.sim_server import run_sim_server
from proxy.runtime.live import LiveRuntime
from proxy.runtime.prefill import PrefillRate
from proxy.runtime.scraper import EngineScraper

from .conftest import proxy_settings, sim_config

BASE = "http://engine.test"
VLLM_METRICS = """\
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="2000",num_gpu_blocks_override="None"} 1.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m"} %(prompt)s
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="m"} %(hits)s
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="m"} %(prompt)s
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_sum{model_name="m"} %(prefill)s
vllm:request_prefill_time_seconds_count{model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} %(waiting)s
"""


def vllm_text(prompt, hits, prefill, waiting=0):
    return VLLM_METRICS % {"prompt": prompt, "hits": hits, "prefill": prefill, "waiting": waiting}


class Scripted:
    """An adapter whose scrapes return the given snapshots in turn."""

    name = "scripted"

    def __init__(self, snaps):
        self.snaps = list(snaps)

    async def scrape(self):
        return self.snaps.pop(0)


def runtime(**kw) -> LiveRuntime:
    return LiveRuntime(proxy_settings(BASE, **kw), client=None, metrics=None, clock=lambda: 0.0)


def test_vllm_metrics_carry_capacity_and_prefill_time():
    snap = VllmAdapter(None, BASE).parse_metrics(vllm_text(1000, 200, 0.5, waiting=3))
    assert (snap.capacity_blocks, snap.block_size, snap.capacity_tokens) == (2000, 16, 32000)
    assert snap.prompt_tokens == 1000 and snap.prefill_seconds == 0.5 and snap.waiting == 3


def test_sglang_capacity_comes_from_server_info():
    ad = SglangAdapter(None, BASE)
    ad.server_info = {"max_total_num_tokens": 50000, "page_size": 1}
    snap = ad.parse_metrics("sglang:num_queue_reqs 5\n")
    assert snap.capacity_tokens == 50000 and snap.waiting == 5


async def test_capacity_queue_and_budget_reach_the_core():
    rt = runtime(warmup_prefill_share=0.25)
    vllm = VllmAdapter(None, BASE)
    rt.scraper = EngineScraper(
        Scripted(
            [
                vllm.parse_metrics(vllm_text(1000, 200, 0.5, waiting=7)),
                vllm.parse_metrics(vllm_text(9000, 1200, 2.5, waiting=1)),
            ]
        ),
        None,
        on_snapshot=rt._on_snapshot,
    )
    rt.observer.engine_waiting = lambda: rt.scraper.waiting
    default_rate = rt.policy.config.prefill_tokens_per_s
    await rt.scraper.scrape_once()
    assert rt.policy.residency.capacity_tokens == 32000  # 2000 blocks × 16, token ratio unknown
    assert rt.observer.load().waiting == 7  # the engine's queue -> EngineLoad
    assert rt.policy.config.prefill_tokens_per_s == default_rate  # one scrape: no rate yet
    await rt.scraper.scrape_once()
    rate = (8000 - 1000) / 2.0  # computed tokens / prefill seconds
    assert rt.policy.config.prefill_tokens_per_s == pytest.approx(rate)
    assert rt.policy.planner.cfg.warm_budget()[0] == pytest.approx(0.25 * rate)  # warmup_prefill_share
    assert rt.budget["warmup_tokens_per_s"] == round(0.25 * rate)
    assert rt.budget["source"] == "measured (engine)" and rt.observer.load().waiting == 1


async def test_operator_budget_wins_and_restart_clears_the_shadow():
    rt = runtime(policy_overrides={"warmup_tokens_per_s": 123.0})
    snaps = [
        EngineSnapshot(prefix_queries=5000.0, prompt_tokens=5000.0, prefix_hits=0.0, prefill_seconds=1.0),
        EngineSnapshot(prefix_queries=9000.0, prompt_tokens=9000.0, prefix_hits=0.0, prefill_seconds=2.0),
        EngineSnapshot(prefix_queries=10.0, prompt_tokens=10.0, prefix_hits=0.0, prefill_seconds=0.01),
    ]
    rt.scraper = EngineScraper(Scripted(snaps), None, on_snapshot=rt._on_snapshot)
    cleared = []
    original = rt.policy.residency.on_engine_truth
    rt.policy.residency.on_engine_truth = lambda **kw: (cleared.append(kw.get("cleared", False)), original(**kw))
    for _ in snaps:
        await rt.scraper.scrape_once()
    assert rt.policy.config.prefill_tokens_per_s == pytest.approx(4000)  # measured, for lead times
    assert rt.policy.config.warm_budget()[0] == 123.0  # budget fixed by the operator
    assert rt.budget["fixed"] and rt.budget["measured_prefill_tokens_per_s"] == 4000
    assert cleared == [True]  # only the third scrape: counters went back, engine restarted


def test_prefill_rate_prefers_the_engine_and_needs_enough_tokens():
    r = PrefillRate()
    r.add_request(32, 0.001)  # overhead-dominated: ignored
    assert r.tokens_per_s() is None
    for _ in range(4):
        r.add_request(500, 0.5)
    assert r.source == "observed" and r.tokens_per_s() == pytest.approx(1000)
    for _ in range(2):
        r.add_request(600, 0.3, alone=True)  # started with nothing else in flight
    assert r.source == "alone" and r.tokens_per_s() == pytest.approx(2000)
    r.add_engine_totals(0, 0.0)
    r.add_engine_totals(4000, 1.0)
    assert r.source == "engine" and r.tokens_per_s() == pytest.approx(4000)
    r.add_engine_totals(100, 0.1)  # counter reset: no sample
    assert r.tokens_per_s() == pytest.approx(4000)


def test_live_proxy_reads_the_sims_capacity_and_measures_prefill(http):
    from .conftest import agent_prompts

    prompts = agent_prompts(3, 150)
    with run_sim_server(sim_config(capacity_blocks=300, speed=1.0)) as sim:
        with run_proxy_server(proxy_settings(sim.url)) as px:
            px.call(lambda: px.live.scraper.scrape_once())
            assert px.live.policy.residency.capacity_tokens == 300 * 16
            for i in range(6):
                body = {
                    "model": "sim-llama-3.1-8b",
                    "max_tokens": 4,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                    "messages": [
                        {"role": "system", "content": prompts["ABC"[i % 3]]},
                        {"role": "user", "content": f"question {i}"},
                    ],
                }
                with http.stream("POST", px.url + "/v1/chat/completions", json=body) as r:
                    assert r.status_code == 200
                    r.read()
            px.call(lambda: px.live.settle(5.0))
            px.call(lambda: px.live.scraper.scrape_once())
            info = px.live.engine_info()
    budget = info["warmup_budget"]
    assert budget["source"] == "measured (alone)"  # one request at a time: least queueing
    # TTFT includes the step overhead and the proxy hop: the measured rate is below the sim's 15k
    assert 1000 < budget["measured_prefill_tokens_per_s"] < 15000
    share = budget["warmup_share"]
    assert budget["warmup_tokens_per_s"] == pytest.approx(share * budget["measured_prefill_tokens_per_s"], rel=0.01)
