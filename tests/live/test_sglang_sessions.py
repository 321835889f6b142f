"""SGLang's session radix cache from the proxy's side (docs/sglang-sessions.md): the adapter's probe,
`session_id` tagging and `/close_session` against a mock SGLang (respx, its documented shapes), the
runtime driver's rules, and the whole loop through the proxy against the simulated engine with
`--enable-session-radix-cache` on."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import respx

from proxy.core.session_close import CloseParams
from proxy.engines.base import CAP_SESSION_CACHE
from proxy.engines.sglang import SglangAdapter
from proxy.harness.proxy_server import run_proxy_server
from proxy.harness.sim_server import run_sim_server
from proxy.runtime.sglang_sessions import SessionCacheDriver

from .conftest import ADMIN, MODEL, agent_prompts, proxy_settings, sim_config

BASE = "http://sglang.test"


def _mock_sglang(session_cache: bool, close_status: int = 200) -> respx.Route:
    respx.get(f"{BASE}/get_server_info").mock(
        return_value=httpx.Response(
            200, json={"enable_session_radix_cache": session_cache, "radix_eviction_policy": "priority"}
        )
    )
    respx.get(f"{BASE}/metrics").mock(return_value=httpx.Response(200, text="sglang:cache_hit_rate 0.5\n"))
    return respx.post(f"{BASE}/close_session").mock(return_value=httpx.Response(close_status))


@respx.mock
async def test_probe_reads_the_session_cache_flag_and_close_posts_the_documented_body():
    close = _mock_sglang(True)
    async with httpx.AsyncClient() as client:
        a = SglangAdapter(client, BASE, session_tags=True)
        await a.probe()
        assert CAP_SESSION_CACHE in a.capabilities
        assert await a.close_session("s-1") is True
    assert json.loads(close.calls[0].request.content) == {"session_id": "s-1"}
    assert a.counters["session_closes"] == 1


@respx.mock
async def test_without_the_flag_no_tags_and_no_closes():
    close = _mock_sglang(False)
    async with httpx.AsyncClient() as client:
        a = SglangAdapter(client, BASE, session_tags=True)
        await a.probe()
        assert CAP_SESSION_CACHE not in a.capabilities
        assert "session_cache" in a.info()["disabled"]
        assert a.session_fields("s-1", {"messages": []}) == {}
        assert await a.close_session("s-1") is False
    assert not close.called


@respx.mock
async def test_session_fields_never_override_the_clients_and_need_the_opt_in():
    _mock_sglang(True)
    async with httpx.AsyncClient() as client:
        a = SglangAdapter(client, BASE)
        await a.probe()
        assert a.session_fields("s-1", {"messages": []}) == {}  # not opted in
        a.session_tags = True
        assert a.session_fields("s-1", {"messages": []}) == {"session_id": "s-1"}
        assert a.session_fields("s-1", {"session_id": "mine"}) == {}
        assert a.session_fields("s-1", {"session_params": {"id": "x"}}) == {}
        assert a.session_fields(None, {"messages": []}) == {}


@respx.mock
async def test_a_failed_close_is_fail_open():
    _mock_sglang(True, close_status=500)
    async with httpx.AsyncClient() as client:
        a = SglangAdapter(client, BASE, session_tags=True)
        await a.probe()
        assert await a.close_session("s-1") is False
        respx.post(f"{BASE}/close_session").mock(side_effect=httpx.ConnectError("down"))
        assert await a.close_session("s-1") is False
    assert a.counters["session_close_errors"] == 2


class FakeAdapter:
    def __init__(self, fail: bool = False) -> None:
        self.closed: list[str] = []
        self.fail = fail

    def session_fields(self, session_id, body):
        return {"session_id": session_id} if session_id else {}

    async def close_session(self, session_id: str) -> bool:
        if self.fail:
            raise RuntimeError("boom")
        self.closed.append(session_id)
        return True


P = CloseParams(default_idle_s=10.0, min_idle_s=1.0)


async def test_driver_closes_only_what_it_tagged_once_due():
    fake = FakeAdapter()
    d = SessionCacheDriver(fake, P, engine_id=lambda tenant, key: f"e-{key}")
    assert d.fields("t", "k1", {"messages": []}) == {"session_id": "e-k1"}
    assert d.fields("t", "k2", {"session_id": "client"}) == {}  # the client's own id
    for key in ("k1", "k2"):
        d.on_request("t", key, 0.0)
        d.on_response("t", key, "stop", 1.0)
    d.tick(5.0)
    await d.drain()
    assert fake.closed == []  # not idle long enough
    d.tick(12.0)
    await d.drain()
    assert fake.closed == ["e-k1"]  # k2 was never tagged by the proxy: not ours to close
    assert d.info()["closed"] == 1 and d.info()["tracked"] == 0


async def test_driver_never_closes_after_a_tool_call_and_survives_an_adapter_error():
    fake = FakeAdapter(fail=True)
    d = SessionCacheDriver(fake, P)
    d.fields("t", "k", {})
    d.on_request("t", "k", 0.0)
    d.on_response("t", "k", "tool_calls", 1.0)
    d.tick(1e6)
    await d.drain()
    assert d.info()["close_failed"] == 0
    d.on_request("t", "k", 2.0)
    d.on_response("t", "k", "stop", 3.0)
    d.tick(1e6)
    await d.drain()
    assert d.info()["close_failed"] == 1  # raised inside: counted, swallowed


@pytest.mark.sockets
def test_through_the_proxy_the_sim_engine_tags_and_closes_the_session(http):
    """An app with no session ids: its second call carries the proxy's session to the engine (the
    first is a new session's first call: nothing to continue yet), and once idle past the
    (short, for the test) default think time the proxy closes it."""
    system = agent_prompts(1)["A"]
    with run_sim_server(sim_config(session_radix_cache=True, capacity_blocks=400)) as sim:
        settings = proxy_settings(sim.url, engine="sglang", sglang_sessions=True, sglang_session_default_idle_s=0.4)
        with run_proxy_server(settings) as px:
            engine = http.get(px.url + "/debug/engine", headers={"authorization": f"Bearer {ADMIN}"}).json()
            assert CAP_SESSION_CACHE in engine["capabilities"]
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": "first question"}]
            r = http.post(px.url + "/v1/chat/completions", json={"model": MODEL, "messages": msgs, "max_tokens": 64})
            assert r.status_code == 200
            px.call(lambda: px.live.settle(5.0))
            msgs += [r.json()["choices"][0]["message"], {"role": "user", "content": "and a follow-up"}]
            r = http.post(px.url + "/v1/chat/completions", json={"model": MODEL, "messages": msgs, "max_tokens": 64})
            assert r.status_code == 200
            px.call(lambda: px.live.settle(5.0))
            pool = sim.service.engine.sessions
            assert pool is not None and pool.live_sessions() == 1
            (sid,) = list(pool._gen)
            assert pool.session_blocks(sid) > 0
            deadline = time.monotonic() + 10.0
            while pool.live_sessions() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert pool.live_sessions() == 0 and pool.closed == 1
            info = http.get(px.url + "/debug/engine", headers={"authorization": f"Bearer {ADMIN}"}).json()
            assert info["sglang_sessions"]["tagged"] == 1 and info["sglang_sessions"]["closed"] == 1


def test_driver_tick_outside_a_loop_is_not_needed():
    """`tick` schedules on the running loop; the live tick loop calls it there."""
    d = SessionCacheDriver(FakeAdapter(), P)
    assert asyncio.run(_tick_then_drain(d)) == []


async def _tick_then_drain(d: SessionCacheDriver) -> list[str]:
    d.tick(0.0)
    await d.drain()
    return d.adapter.closed  # type: ignore[attr-defined]
