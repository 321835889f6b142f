"""Engine adapters against mocked engines (respx): request shapes, credentials, fallbacks."""

import json

import httpx
import respx

from proxy.core.action_payload import ActionPayload
from proxy.core.actions import Action
from proxy.engines.base import CAP_PRIORITY, CAP_WARM_TOKENS, WARMUP_HEADER, warm_spec
from proxy.engines.sglang import SglangAdapter
from proxy.engines.vllm import VllmAdapter
from proxy.runtime.scraper import EngineScraper

BASE = "http://engine.test"
PAYLOAD = {
    "kind": "chat",
    "model": "m",
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "cache_salt": "tenantA",
    "messages": [{"role": "system", "content": "You are A."}],
}


ANCHOR = ActionPayload(PAYLOAD)


def action(payload=ANCHOR, h=7, reason="transition", priority=80):
    return Action("warm", reason, "tenantA", "abc", (5, h), 40, payload, priority, 0.0, 10.0)


@respx.mock
async def test_vllm_tokenizes_once_then_warms_with_token_ids():
    tok = respx.post(f"{BASE}/tokenize").mock(return_value=httpx.Response(200, json={"tokens": [1, 2, 3], "count": 3}))
    comp = respx.post(f"{BASE}/v1/completions").mock(
        return_value=httpx.Response(
            200, json={"usage": {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 0}}}
        )
    )
    async with httpx.AsyncClient() as client:
        ad = VllmAdapter(client, BASE, "proxy-key")
        r1 = await ad.warm(action())
        r2 = await ad.warm(action())
    assert r1.ok and r2.ok and r1.prompt_tokens == 3
    assert tok.call_count == 1 and comp.call_count == 2
    tbody = json.loads(tok.calls[0].request.content)
    assert tbody["add_generation_prompt"] is False and tbody["tools"] == PAYLOAD["tools"]
    req = comp.calls[0].request
    body = json.loads(req.content)
    assert body["prompt"] == [1, 2, 3] and body["max_tokens"] == 1 and body["cache_salt"] == "tenantA"
    assert req.headers["authorization"] == "Bearer proxy-key" and req.headers[WARMUP_HEADER] == "1"


@respx.mock
async def test_vllm_without_tokenize_falls_back_to_chat_with_tool_choice_none():
    respx.post(f"{BASE}/tokenize").mock(return_value=httpx.Response(404))
    chat = respx.post(f"{BASE}/v1/chat/completions").mock(
        return_value=httpx.Response(200, json={"usage": {"prompt_tokens": 9}})
    )
    async with httpx.AsyncClient() as client:
        ad = VllmAdapter(client, BASE)
        r = await ad.warm(action())
    assert r.ok and CAP_WARM_TOKENS not in ad.capabilities and "tokenize" in ad.disabled[CAP_WARM_TOKENS]
    body = json.loads(chat.calls[0].request.content)
    assert body["tool_choice"] == "none" and body["max_tokens"] == 1
    assert "authorization" not in chat.calls[0].request.headers  # no key configured: none sent


@respx.mock
async def test_repeated_failures_disable_warmups():
    respx.post(f"{BASE}/tokenize").mock(return_value=httpx.Response(500))
    async with httpx.AsyncClient() as client:
        ad = VllmAdapter(client, BASE)
        results = [await ad.warm(action()) for _ in range(6)]
    assert not any(r.ok for r in results)
    assert not ({"warm_tokens", "warm_chat"} & ad.capabilities)
    assert results[-1].unsupported


def test_tool_resume_payload_appends_assistant_turn():
    asst = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}
    spec = warm_spec(action(ActionPayload(PAYLOAD, asst), reason="tool_resume"))
    assert spec.messages[-1] == asst and spec.messages[0] == PAYLOAD["messages"][0]
    spec = warm_spec(action(ActionPayload({"kind": "completion", "model": "m", "prompt": [4, 5, 6]})))
    assert spec.token_ids == (4, 5, 6)


@respx.mock
async def test_sglang_priority_only_in_priority_eviction_mode():
    respx.get(f"{BASE}/get_server_info").mock(
        return_value=httpx.Response(200, json={"radix_eviction_policy": "priority", "served_model_name": "m"})
    )
    respx.get(f"{BASE}/metrics").mock(return_value=httpx.Response(200, text="sglang:cache_hit_rate 0.5\n"))
    chat = respx.post(f"{BASE}/v1/chat/completions").mock(return_value=httpx.Response(200, json={"usage": {}}))
    async with httpx.AsyncClient() as client:
        ad = SglangAdapter(client, BASE, priority_on_requests=True)
        await ad.probe()
        assert CAP_PRIORITY in ad.capabilities
        await ad.warm(action(priority=80))
        snap = await ad.scrape()
    assert json.loads(chat.calls[0].request.content)["priority"] == 80
    assert ad.request_extras(0.5) == {"priority": 50}
    assert snap.hit_rate == 0.5


@respx.mock
async def test_scraper_hit_ratio_is_windowed():
    texts = iter(
        [
            "vllm:prefix_cache_queries_total 100\nvllm:prefix_cache_hits_total 10\nvllm:num_requests_waiting 5\n",
            "vllm:prefix_cache_queries_total 200\nvllm:prefix_cache_hits_total 90\nvllm:num_requests_waiting 3\n",
        ]
    )
    respx.get(f"{BASE}/metrics").mock(side_effect=lambda req: httpx.Response(200, text=next(texts)))
    async with httpx.AsyncClient() as client:
        sc = EngineScraper(VllmAdapter(client, BASE), None)
        await sc.scrape_once()
        assert sc.window_hit_ratio == 0.1
        await sc.scrape_once()
    assert sc.window_hit_ratio == 0.8 and sc.waiting == 3  # a queue seen twice: the smaller


async def test_scraper_ignores_a_queue_seen_in_one_scrape_only():
    from proxy.engines.base import EngineSnapshot

    class Scripted:
        def __init__(self, waits):
            self.waits = list(waits)

        async def scrape(self):
            return EngineSnapshot(waiting=self.waits.pop(0))

    sc = EngineScraper(Scripted([0, 1, 0, 2, 2]), None)
    seen = []
    for _ in range(5):
        await sc.scrape_once()
        seen.append(sc.waiting)
    assert seen == [0, 0, 0, 0, 2]


@respx.mock
async def test_lmcache_lookup_both_answer_shapes_and_pin_once():
    from proxy.engines.lmcache import LmcacheClient

    LM = "http://lmcache.test"
    answers = iter(
        [{"event_id": "e", "inst0": ["LocalCPUBackend", 32]}, {"layout_info": {"inst0": ["LocalCPUBackend", 16]}}]
    )
    respx.post(f"{LM}/lookup").mock(side_effect=lambda req: httpx.Response(200, json=next(answers)))
    pin = respx.post(f"{LM}/pin").mock(return_value=httpx.Response(200, json={"event_id": "p"}))
    async with httpx.AsyncClient() as client:
        lm = LmcacheClient(client, LM)
        assert await lm.maybe_pin(list(range(40)), priority=90)
        assert not await lm.maybe_pin(list(range(40)), priority=90)  # once per anchor
        assert not await lm.maybe_pin(list(range(8)), priority=10)  # low survival: no pin
        assert await lm.lookup(list(range(40))) == {"inst0": 16}
    body = json.loads(pin.calls[0].request.content)
    assert body["instance_id"] == "inst0" and body["tokens"] == list(range(32))


@respx.mock
async def test_lmcache_error_disables_client():
    from proxy.engines.lmcache import LmcacheClient

    respx.post("http://lm.test/lookup").mock(return_value=httpx.Response(500))
    async with httpx.AsyncClient() as client:
        lm = LmcacheClient(client, "http://lm.test")
        assert not await lm.maybe_pin([1, 2, 3], priority=99)
    assert lm.disabled and "500" in lm.disabled
