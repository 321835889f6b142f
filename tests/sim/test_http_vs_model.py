"""The HTTP engine on a real socket and the in-process model give the same hits for the same requests."""

import random

import httpx
import pytest

from proxy.harness.sim_server import run_sim_server
from proxy.simengine.chat_template import render_chat
from proxy.simengine.engine import EngineRequest, SimEngine
from proxy.simengine.generation import plan_output
from proxy.simengine.service import SimConfig
from proxy.simengine.tokenizer import SimTokenizer

pytestmark = pytest.mark.sockets
MODEL = SimConfig().model


def workload(seed=7, n=60):
    """Sequential multi-agent chat traffic: 4 agents with long system prompts, 6 sessions, salts."""
    rng = random.Random(seed)
    agents = [f"You are agent {a}. " + (f"Rules for agent {a}. ") * 30 for a in range(4)]
    histories = {s: [] for s in range(6)}
    for _ in range(n):
        a, s = rng.randrange(4), rng.randrange(6)
        histories[s].append({"role": "user", "content": f"turn {len(histories[s])} " + "detail " * rng.randint(5, 60)})
        msgs = [{"role": "system", "content": agents[a]}] + histories[s][-6:]
        yield {
            "model": MODEL,
            "messages": msgs,
            "max_tokens": rng.choice([1, 8, 30]),
            **({"cache_salt": "tenant-1"} if s == 5 else {}),
        }


@pytest.mark.parametrize("eviction", ["lru", "priority"])
def test_http_engine_matches_in_process_model(eviction):
    cfg = SimConfig(speed=0, capacity_blocks=160, output_tokens=10, eviction=eviction, retention_seconds=1e9)
    tok = SimTokenizer()
    model = SimEngine(cfg.engine_config())
    http_cached, model_cached, now = [], [], 0.0
    with run_sim_server(cfg) as sim, httpx.Client(base_url=sim.url, timeout=30) as client:
        for i, body in enumerate(workload()):
            r = client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            http_cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
            ids = tok.encode(render_chat(body["messages"]))
            out = plan_output(
                tok,
                ids,
                body["max_tokens"],
                output_tokens=cfg.output_tokens,
                output_jitter=cfg.output_jitter,
                seed=cfg.seed,
            )
            req = model.submit(EngineRequest(i, ids, out.ids, salt=body.get("cache_salt")), now)
            now = model.run_until_idle(now)
            model_cached.append(req.cached_tokens)
        m = client.get("/metrics").text
        live = sim.service.engine.pool.stats()
    assert http_cached == model_cached
    assert sum(model_cached) > 0 and model.pool.stats().evictions > 0  # the sequence exercises both
    assert live.hits == model.pool.stats().hits and live.evictions == model.pool.stats().evictions
    assert f'vllm:prefix_cache_hits_total{{engine="0",model_name="{MODEL}"}} {float(sum(http_cached))}' in m


def test_http_engine_with_host_tier_matches_in_process_model():
    """The same equality with a host tier: loads, host LRU and offload counters agree too."""
    cfg = SimConfig(speed=0, capacity_blocks=120, output_tokens=10, cpu_blocks=300)
    tok = SimTokenizer()
    model = SimEngine(cfg.engine_config())
    http_cached, model_cached, now = [], [], 0.0
    with run_sim_server(cfg) as sim, httpx.Client(base_url=sim.url, timeout=30) as client:
        for i, body in enumerate(workload(seed=11, n=50)):
            r = client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            http_cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
            ids = tok.encode(render_chat(body["messages"]))
            out = plan_output(
                tok,
                ids,
                body["max_tokens"],
                output_tokens=cfg.output_tokens,
                output_jitter=cfg.output_jitter,
                seed=cfg.seed,
            )
            req = model.submit(EngineRequest(i, ids, out.ids, salt=body.get("cache_salt")), now)
            now = model.run_until_idle(now)
            model_cached.append(req.cached_tokens)
        m = client.get("/metrics").text
        live = sim.service.engine
    assert http_cached == model_cached
    assert model.external_hit > 0 and model.host.stats().evictions > 0 and model.pool.stats().evictions > 0
    assert live.external_hit == model.external_hit and live.host.stats() == model.host.stats()
    assert live.offload["CPU_to_GPU"][0] == model.offload["CPU_to_GPU"][0]
    assert (
        f'vllm:external_prefix_cache_hits_total{{engine="0",model_name="{MODEL}"}} {float(model.external_hit)}'
    ) in m
