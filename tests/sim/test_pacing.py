"""Wall-clock pacing (--speed), concurrency and client disconnects on a real socket."""

import asyncio
import json
import time

import httpx
import pytest

from proxy.cachemodel.cost_model import CostModel
from proxy.harness.sim_server import run_sim_server
from proxy.simengine.service import SimConfig

pytestmark = pytest.mark.sockets
MODEL = SimConfig().model


def test_speed_scales_wall_time_and_warm_is_faster():
    # 1,000 prefill tokens/s: a cold 2,000-token prompt is ~2 virtual seconds = ~0.4 s wall at speed 5
    cfg = SimConfig(speed=5, capacity_blocks=1024, cost=CostModel(prefill_token_s=1e-3, attn_token2_s=0.0))
    body = {"model": MODEL, "prompt": list(range(10, 2010)), "max_tokens": 1}
    with run_sim_server(cfg) as sim, httpx.Client(base_url=sim.url, timeout=30) as c:
        t0 = time.perf_counter()
        assert c.post("/v1/completions", json=body).json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert c.post("/v1/completions", json=body).json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 1984
        warm = time.perf_counter() - t0
        ttft = next(
            line
            for line in c.get("/metrics").text.splitlines()
            if line.startswith("vllm:time_to_first_token_seconds_sum")
        )
    assert cold >= 0.39 and warm < cold / 3, (cold, warm)
    assert 2.0 < float(ttft.split()[-1]) < 2.5  # virtual seconds: 2.006 cold + 0.022 warm (+ loop lag)


def test_concurrent_requests_all_finish_and_gauges_return_to_zero():
    cfg = SimConfig(speed=0, capacity_blocks=300, output_tokens=20, max_num_seqs=4, max_num_batched_tokens=512)

    async def drive(url):
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            bodies = [
                {
                    "model": MODEL,
                    "messages": [
                        {"role": "system", "content": f"agent {i % 3} " * 100},
                        {"role": "user", "content": f"q{i}"},
                    ],
                    "stream": i % 2 == 0,
                }
                for i in range(24)
            ]
            rs = await asyncio.gather(*(c.post("/v1/chat/completions", json=b) for b in bodies))
            return [r.status_code for r in rs], (await c.get("/metrics")).text

    with run_sim_server(cfg) as sim:
        codes, text = asyncio.run(drive(sim.url))
        stats = sim.service.engine.pool.stats()
    assert codes == [200] * 24
    assert f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 0.0' in text
    assert f'vllm:num_requests_waiting{{engine="0",model_name="{MODEL}"}} 0.0' in text
    assert stats.held == 0 and stats.hits > 0


def test_client_disconnect_mid_stream_frees_blocks():
    cfg = SimConfig(speed=1, capacity_blocks=300, output_tokens=2000, output_jitter=0.0)
    with run_sim_server(cfg) as sim:
        with httpx.Client(base_url=sim.url, timeout=30) as c:
            with c.stream(
                "POST",
                "/v1/completions",
                json={"model": MODEL, "prompt": "tell me", "max_tokens": 2000, "stream": True},
            ) as r:
                for line in r.iter_lines():
                    if line.startswith("data: ") and '"text":"' in line:
                        break  # got a token; hang up
            deadline = time.monotonic() + 5
            while sim.service.engine.has_work and time.monotonic() < deadline:
                time.sleep(0.02)
        assert not sim.service.engine.has_work
        assert sim.service.engine.pool.stats().held == 0


def test_virtual_timings_are_the_cost_model_even_at_high_speed():
    """At speed 500 Python overhead dwarfs the sleeps; the virtual TTFT must still be exact."""
    cfg = SimConfig(speed=500, capacity_blocks=1024)
    prompts = [list(range(i * 3000, i * 3000 + 2000)) for i in range(3)]
    with run_sim_server(cfg) as sim, httpx.Client(base_url=sim.url, timeout=30) as c:
        for p in prompts:
            assert c.post("/v1/completions", json={"model": MODEL, "prompt": p, "max_tokens": 1}).status_code == 200
        text = c.get("/metrics").text
    total = float(
        next(x for x in text.splitlines() if x.startswith("vllm:time_to_first_token_seconds_sum")).split()[-1]
    )
    assert total == pytest.approx(3 * cfg.cost.prefill_s(2000), rel=1e-9)


def test_a_streamed_chat_sends_its_role_chunk_with_the_first_token_not_before():
    """vLLM's `chat_completion_stream_generator` sends the role-only chunk on its first iteration
    over the engine's outputs, after prefill, so a client or proxy timing the first chunk times
    prefill. 1,000 prefill tokens/s at speed 5: a cold prompt of n tokens takes n / 5,000 s of wall time."""
    cfg = SimConfig(speed=5, capacity_blocks=1024, cost=CostModel(prefill_token_s=1e-3, attn_token2_s=0.0))
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": " ".join(f"w{i}" for i in range(2000))}],
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with run_sim_server(cfg) as sim, httpx.Client(base_url=sim.url, timeout=30) as c:
        t0 = time.perf_counter()
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            at = time.perf_counter() - t0
            rest = [line for line in lines if line.startswith("data: ")]
    assert json.loads(first[6:])["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    prompt = json.loads(rest[-2][6:])["usage"]["prompt_tokens"]
    assert prompt >= 1500 and at >= 0.8 * prompt / 5000, (prompt, at)  # the prefill, not the round trip
    assert rest[-1] == "data: [DONE]"
