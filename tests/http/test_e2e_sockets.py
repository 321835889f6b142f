"""End to end on real sockets: a real upstream process, the proxy started by `cachescout serve`.

ASGITransport buffers response bodies, so streaming cadence and disconnects are only testable here.
"""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from proxy.http.app import create_app
from proxy.settings import Settings

from .conftest import free_port

pytestmark = pytest.mark.sockets

CHAT = {
    "model": "fake",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello proxy world"}],
}


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0, timeout=20)


@pytest.mark.parametrize("policy", ["off", "on"])
def test_openai_sdk_same_results_direct_and_proxied(
    request: pytest.FixtureRequest, upstream_url: str, policy: str
) -> None:
    proxy_url = request.getfixturevalue("proxy_url" if policy == "off" else "policy_proxy_url")
    results = []
    for base in (upstream_url, proxy_url):
        client = sdk(base)
        chat = client.chat.completions.create(**CHAT).model_dump()
        comp = client.completions.create(model="fake", prompt="one two three").model_dump()
        stream = [
            c.model_dump()
            for c in client.chat.completions.create(**CHAT, stream=True, stream_options={"include_usage": True})
        ]
        comp_stream = [c.model_dump() for c in client.completions.create(model="fake", prompt="a b", stream=True)]
        models = client.models.list().model_dump()
        results.append((chat, comp, stream, comp_stream, models))
    direct, proxied = results
    assert proxied == direct
    chat, _, stream, _, _ = proxied
    assert chat["choices"][0]["message"]["content"] == "echo: hello proxy world"
    assert (
        "".join(c["choices"][0]["delta"]["content"] or "" for c in stream if c["choices"]) == "echo: hello proxy world"
    )
    assert stream[-1]["usage"]["completion_tokens"] == 4
    if policy == "on":  # the policy watched without failing (it must never change what clients get)
        metrics = httpx.get(proxy_url + "/metrics").text
        assert "cachescout_policy_errors_total 0.0" in metrics


def test_stream_bytes_identical(upstream_url: str, proxy_url: str) -> None:
    bodies = []
    for base in (upstream_url, proxy_url):
        with httpx.stream(
            "POST",
            base + "/v1/chat/completions",
            content=json.dumps({**CHAT, "stream": True}),
            headers={"content-type": "application/json"},
            timeout=20,
        ) as r:
            bodies.append((r.status_code, r.headers["content-type"], b"".join(r.iter_raw())))
    assert bodies[0] == bodies[1]
    assert bodies[1][2].endswith(b"data: [DONE]\n\n")


def test_request_headers_and_body_arrive_as_sent(upstream_url: str, proxy_url: str) -> None:
    body = b'{"weird":  "spacing" , "n": 1.0e3}'
    headers = {
        "authorization": "Bearer sk-abc",
        "x-trace": "t1",
        "content-type": "application/json; charset=utf-8",
        "user-agent": "agent-framework/1.0",
        "accept": "application/json",
    }
    seen = []
    for base in (upstream_url, proxy_url):
        r = httpx.post(base + "/echo?q=1&q=2", content=body, headers=headers, timeout=20)
        echo = r.json()
        seen.append(
            (
                echo["method"],
                echo["path"],
                echo["query"],
                echo["body_b64"],
                sorted((k, v) for k, v in echo["headers"] if k not in ("host", "connection")),
            )
        )
        assert r.headers["x-upstream"] == "fake" and r.headers["set-cookie"] == "a=b"
    assert seen[0] == seen[1]  # the proxy's client adds no header of its own


def test_first_chunk_arrives_before_upstream_sends_the_last(upstream_url: str, proxy_url: str) -> None:
    payload = json.dumps({**CHAT, "model": "gated", "stream": True})
    with httpx.stream("POST", proxy_url + "/v1/chat/completions", content=payload, timeout=20) as r:
        assert r.status_code == 200
        raw = r.iter_raw()
        first = b""
        while b"\n\n" not in first:
            first += next(raw)
        state = httpx.get(upstream_url + "/_control/state").json()
        assert state["gated_first_sent"] and not state["gated_last_sent"]
        assert b'"role":"assistant"' in first
        httpx.post(upstream_url + "/_control/release")
        rest = b"".join(raw)
    assert rest.endswith(b"data: [DONE]\n\n")
    assert httpx.get(upstream_url + "/_control/state").json()["gated_last_sent"]


def test_client_disconnect_closes_upstream(upstream_url: str, proxy_url: str) -> None:
    before = httpx.get(upstream_url + "/_control/state").json()["disconnects"]
    payload = json.dumps({**CHAT, "model": "endless", "stream": True})
    with httpx.stream("POST", proxy_url + "/v1/chat/completions", content=payload, timeout=20) as r:
        raw = r.iter_raw()
        got = b""
        while got.count(b"\n\n") < 3:
            got += next(raw)
    # leaving the block closes the client connection mid-stream
    deadline = time.monotonic() + 5
    state = {}
    while time.monotonic() < deadline:
        state = httpx.get(upstream_url + "/_control/state").json()
        if state["disconnects"] > before:
            break
        time.sleep(0.05)
    assert state["disconnects"] == before + 1, state
    chunks = state["endless_chunks"]
    time.sleep(0.3)
    assert httpx.get(upstream_url + "/_control/state").json()["endless_chunks"] == chunks  # upstream stopped


def test_upstream_dying_mid_stream_is_not_a_clean_end(upstream_url: str, proxy_url: str) -> None:
    payload = json.dumps({**CHAT, "model": "dies", "stream": True})
    got = b""
    with pytest.raises(httpx.RemoteProtocolError):  # incomplete chunked body, exactly as direct
        with httpx.stream("POST", proxy_url + "/v1/chat/completions", content=payload, timeout=20) as r:
            for chunk in r.iter_raw():
                got += chunk
    assert got.startswith(b"data: ") and b"[DONE]" not in got
    metrics = httpx.get(proxy_url + "/metrics").text
    assert 'cachescout_upstream_errors_total{kind="protocol"} 1.0' in metrics


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
async def test_real_transport_error_mapping(upstream_url: str, transport: str) -> None:
    """Refused connection -> 502 connect; slow upstream -> 504 timeout; over a real socket, per transport."""
    dead = f"http://127.0.0.1:{free_port()}"
    outcomes = []
    for url, read_timeout, model in ((dead, 5.0, "fake"), (upstream_url, 0.3, "slow")):
        app = create_app(
            Settings(upstream_url=url, read_timeout=read_timeout, policy_enabled=False, upstream_transport=transport)
        )
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://p") as c:
                r = await c.post("/v1/chat/completions", content=json.dumps({**CHAT, "model": model}))
                ready = (await c.get("/readyz")).status_code
                metrics = (await c.get("/metrics")).text
        outcomes.append((r.status_code, r.json()["error"]["type"], ready))
        kind = "connect" if url == dead else "timeout"
        assert f'cachescout_upstream_errors_total{{kind="{kind}"}} 1.0' in metrics
    assert outcomes == [(502, "upstream_unreachable", 503), (504, "upstream_timeout", 200)]


async def test_inprocess_transports_forward_identically(upstream_url: str) -> None:
    """Both upstream transports deliver the same bytes and add no headers."""
    seen = []
    for transport in ("aiohttp", "httpx"):
        app = create_app(Settings(upstream_url=upstream_url, policy_enabled=False, upstream_transport=transport))
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://p") as c:
                r = await c.post("/echo", content=b"\x00binary\xff", headers={"authorization": "Bearer z"})
                s = await c.post("/v1/chat/completions", content=json.dumps({**CHAT, "stream": True}))
        echo = r.json()
        seen.append(
            (echo["body_b64"], sorted((k, v) for k, v in echo["headers"] if k not in ("host", "connection")), s.content)
        )
    assert seen[0] == seen[1]
