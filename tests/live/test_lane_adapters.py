"""Adapters and the slack lane (respx-mocked engines): the scheduling-policy probe, the lowest
priority in each engine's sign convention, the session's routing key on warmups, and the engine's
own load counted apart from the proxy's (scraper.external)."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from proxy.core.action_payload import ActionPayload
from proxy.core.actions import Action
from proxy.engines.base import CAP_SCHED_PRIORITY, LANE_LOWEST, EngineSnapshot, warm_spec
from proxy.engines.routing import routing_key
from proxy.engines.sglang import SglangAdapter
from proxy.engines.vllm import VllmAdapter
from proxy.runtime.payload import BodyPayload
from proxy.runtime.scraper import EngineScraper

BASE = "http://engine.test"
CHAT = {"model": "m", "messages": [{"role": "system", "content": "You are A."}]}


def action(payload: ActionPayload, priority: int = 80) -> Action:
    return Action("warm", "tool_resume", "", "abc", (5, 7), 40, payload, priority, 0.0, 10.0)


def mock_vllm(server_info: dict | None, refusal: int = 200) -> respx.Route:
    respx.get(f"{BASE}/v1/models").mock(return_value=httpx.Response(200, json={"data": [{"id": "m"}]}))
    respx.get(f"{BASE}/metrics").mock(return_value=httpx.Response(200, text="vllm:num_requests_running 0\n"))
    respx.post(f"{BASE}/tokenize").mock(return_value=httpx.Response(200, json={"tokens": [1, 2, 3]}))
    respx.get(f"{BASE}/reset_prefix_cache").mock(return_value=httpx.Response(404))
    info = httpx.Response(200, json=server_info) if server_info is not None else httpx.Response(404)
    respx.get(f"{BASE}/server_info").mock(return_value=info)
    usage = {"usage": {"prompt_tokens": 3}}

    def completions(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body.get("prompt") == "probe" and refusal == 400:
            msg = "Got priority 1 but Priority scheduling is not enabled."
            return httpx.Response(400, json={"error": {"message": msg}})
        return httpx.Response(200, json=usage)

    return respx.post(f"{BASE}/v1/completions").mock(side_effect=completions)


@pytest.mark.parametrize(
    ("info", "refusal", "mode", "policy", "lane"),
    [
        ({"vllm_config": {"scheduler_config": {"policy": "priority"}}}, 200, "auto", "priority", True),
        ({"vllm_config": {"scheduler_config": {"policy": "fcfs"}}}, 200, "on", "fcfs", False),
        (None, 400, "auto", "fcfs", False),
        (None, 400, "on", "fcfs", False),  # the operator's "on" yields to a refusal
        (None, 200, "auto", "unknown", False),  # vLLM V1 accepts priority under FCFS: no evidence
        (None, 200, "on", "unknown", True),
        ({"vllm_config": {"scheduler_config": {"policy": "priority"}}}, 200, "off", "unknown", False),
    ],
)
@respx.mock
async def test_vllm_probe_decides_the_slack_lane(info, refusal, mode, policy, lane):
    comp = mock_vllm(info, refusal)
    async with httpx.AsyncClient() as client:
        ad = VllmAdapter(client, BASE)
        ad.priority_mode = mode
        await ad.probe()
        assert ad.scheduling["policy"] == policy and ad.priority_lane is lane
        assert (CAP_SCHED_PRIORITY in ad.info()["capabilities"]) is lane
        await ad.warm(action(ActionPayload(CHAT)))
    warm = json.loads(comp.calls[-1].request.content)
    assert warm["prompt"] == [1, 2, 3] and warm["max_tokens"] == 1
    if lane:
        assert warm["priority"] == LANE_LOWEST  # vLLM: lower runs first, so the largest
    else:
        assert "priority" not in warm  # today's warmup, unchanged


def mock_sglang(info: dict) -> respx.Route:
    respx.get(f"{BASE}/get_server_info").mock(return_value=httpx.Response(200, json={"served_model_name": "m", **info}))
    respx.get(f"{BASE}/metrics").mock(return_value=httpx.Response(200, text="sglang:num_running_reqs 0\n"))
    return respx.post(f"{BASE}/v1/chat/completions").mock(return_value=httpx.Response(200, json={"usage": {}}))


@pytest.mark.parametrize(
    ("info", "policy", "expected"),
    [
        ({"enable_priority_scheduling": True}, "priority", -LANE_LOWEST),  # higher runs first
        ({"enable_priority_scheduling": True, "schedule_low_priority_values_first": True}, "priority", LANE_LOWEST),
        ({"enable_priority_scheduling": False}, "fcfs", None),
        # one field orders scheduling and retention: the retention lever (action priority 80) wins
        ({"enable_priority_scheduling": True, "radix_eviction_policy": "priority"}, "retention", 80),
    ],
)
@respx.mock
async def test_sglang_lane_sign_and_retention_conflict(info, policy, expected):
    chat = mock_sglang(info)
    async with httpx.AsyncClient() as client:
        ad = SglangAdapter(client, BASE)
        await ad.probe()
        assert ad.scheduling["policy"] == policy
        await ad.warm(action(ActionPayload(CHAT)))
    body = json.loads(chat.calls[-1].request.content)
    assert body.get("priority") == expected
    if policy == "priority":
        sign = -1 if expected < 0 else 1
        assert ad.engine_priority(5) == 5 * sign and ad.engine_priority(10**12) == sign * (LANE_LOWEST - 1)


def test_routing_key_follows_vllm_routers_order():
    assert routing_key({"x-user-id": "u", "x-session-id": "s"}, {"user": "b"}) == ("x-session-id", "s")
    assert routing_key({"x-tenant-id": "t"}, {}) == ("x-tenant-id", "t")
    assert routing_key({"x-request-id": "r"}, {"user": "b"}) == ("user", "b")  # per-request ids: not repeatable
    assert routing_key({}, {"session_params": {"session_id": "p"}, "user": "b"}) == ("session_params.session_id", "p")
    assert routing_key({}, {"session_id": "q", "user_id": "w"}) == ("session_id", "q")
    assert routing_key({}, {"messages": []}) is None


@pytest.mark.parametrize(
    ("routing", "header", "field"),
    [
        (("x-session-id", "sess-9"), ("x-session-id", "sess-9"), None),
        (("x-user-id", "u1"), ("x-user-id", "u1"), None),
        (("user", "u2"), None, ("user", "u2")),
        (("session_params.session_id", "p3"), None, ("session_params", {"session_id": "p3"})),
    ],
)
@respx.mock
async def test_warmup_carries_the_sessions_routing_key(routing, header, field):
    comp = mock_vllm(None)
    kept = BodyPayload("/v1/chat/completions", json.dumps(CHAT).encode(), routing)
    assert warm_spec(action(ActionPayload(kept))).routing == routing
    async with httpx.AsyncClient() as client:
        ad = VllmAdapter(client, BASE)
        await ad.warm(action(ActionPayload(kept)))
        await ad.warm(Action("warm", "transition", "", "zz", (8,), 40, ActionPayload(CHAT), 80, 0.0, 10.0))
    routed, plain = comp.calls[-2].request, comp.calls[-1].request
    if header:
        assert routed.headers[header[0]] == header[1]
    if field:
        assert json.loads(routed.content)[field[0]] == field[1]
    for name in ("x-session-id", "x-user-id"):
        assert name not in plain.headers  # an anchor serves no one session: no key
    assert "user" not in json.loads(plain.content)


async def test_scraper_counts_the_engines_own_load_apart_from_the_proxys():
    class Scripted:
        def __init__(self, loads):
            self.loads = list(loads)

        async def scrape(self):
            running, waiting = self.loads.pop(0)
            return EngineSnapshot(running=running, waiting=waiting)

    own = iter([2, 2, 2, 2, 0, 0, 0, 0, 1, 1])  # sampled before and after each scrape
    sc = EngineScraper(Scripted([(2, 0), (5, 1), (4, 0), (4, 0), (1, 0)]), None)
    sc.own = lambda: next(own)
    seen = []
    for _ in range(5):
        await sc.scrape_once()
        seen.append(sc.external)
    # 0, then 4 seen once (min of two: 0), then 4 twice: 4; then the proxy's own request only: 0
    assert seen == [0, 0, 4, 4, 0]


@pytest.mark.parametrize("lane", [True, False])
@respx.mock
async def test_a_warmup_that_waits_out_its_timeout_behind_clients_is_not_a_broken_lever(lane):
    """In the slack lane a warmup queues behind every client request and may time out under load:
    that must not switch the warm capabilities off (without the lane, 5 failures in a row still do)."""
    info = {"vllm_config": {"scheduler_config": {"policy": "priority" if lane else "fcfs"}}}
    mock_vllm(info)
    respx.post(f"{BASE}/v1/completions").mock(side_effect=httpx.ReadTimeout("queued"))
    async with httpx.AsyncClient() as client:
        ad = VllmAdapter(client, BASE)
        await ad.probe()
        results = [await ad.warm(action(ActionPayload(CHAT))) for _ in range(6)]
    assert not any(r.ok for r in results)
    assert ("warm_tokens" in ad.capabilities) is lane
    assert ad.counters.get("lane_timeouts", 0) == (6 if lane else 0)
