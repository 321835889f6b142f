"""Opt-in engine hints on forwarded requests (`request_priority`, `kv_hints`): only when enabled,
only when the engine has the capability, only for an anchor the planner acted on; otherwise the
forwarded body stays byte-identical."""

from __future__ import annotations

import json

import httpx

from proxy.core.action_payload import ActionPayload
from proxy.core.actions import Action
from proxy.engines.base import WarmResult
from proxy.http.app import create_app

from .conftest import agent_prompts, proxy_settings

SIM_METRICS = (
    "cachescout_sim_evicted_blocks_total 0\n"
    'vllm:cache_config_info{block_size="16",num_gpu_blocks="64",eviction="priority"} 1\n'
)
VLLM_METRICS = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="64"} 1\nvllm:num_requests_waiting 0\n'


def engine(metrics_text: str, seen: list[bytes]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=metrics_text)
        if request.url.path == "/v1/chat/completions":
            seen.append(request.content)
            return httpx.Response(
                200,
                json={
                    "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 1},
                },
            )
        return httpx.Response(404)

    return httpx.MockTransport(handler)


async def run(metrics_text: str, **settings) -> tuple[list[bytes], bytes]:
    seen: list[bytes] = []
    app = create_app(proxy_settings("http://engine.test", **settings), transport=engine(metrics_text, seen))
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "system", "content": agent_prompts(1, 40)["A"]}, {"role": "user", "content": "hi"}],
        }
    ).encode()
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy")
        async with client:
            await client.post("/v1/chat/completions", content=body)
            live = app.state.live
            await __import__("asyncio").sleep(0.05)  # deferred observation
            agent = next(iter(live.policy.agents.by_id.values()))
            live.observer.on_action_result(
                Action(
                    "touch",
                    "transition",
                    "",
                    agent.agent_id,
                    agent.anchor_hashes,
                    10,
                    ActionPayload(None),
                    80,
                    0.0,
                    99.0,
                ),
                WarmResult(ok=True, prompt_tokens=10),
                live.clock(),
            )
            await client.post("/v1/chat/completions", content=body)
    return seen, body


async def test_priority_added_only_when_enabled_and_supported():
    seen, body = await run(SIM_METRICS, engine="auto", request_priority=True)
    assert seen[0] == body  # no action on this anchor yet: untouched bytes
    assert json.loads(seen[1])["priority"] == 80  # the planner's survival priority for the anchor
    assert {k: v for k, v in json.loads(seen[1]).items() if k != "priority"} == json.loads(body)

    seen, body = await run(SIM_METRICS, engine="auto")  # not enabled
    assert seen == [body, body]
    seen, body = await run(VLLM_METRICS, engine="vllm", request_priority=True)  # engine lacks the lever
    assert seen == [body, body]


async def test_kv_hints_envelope_for_vllm():
    seen, body = await run(VLLM_METRICS, engine="vllm", kv_hints=True)
    hints = json.loads(seen[1])["kv_hints"]
    assert hints["protocol_version"] == 1 and hints["actions"][0]["action_type"] == "retain"
    assert hints["actions"][0]["payload"] == {"survival": 0.8}
    assert seen[0] == body
