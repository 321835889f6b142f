"""The forwarder in-process (httpx.ASGITransport), engine mocked by respx: bytes, headers, statuses, errors."""

from __future__ import annotations

import json

import httpx
import pytest
import respx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import UPSTREAM, proxied


def router_transport(router: respx.Router) -> httpx.MockTransport:
    return httpx.MockTransport(router.async_handler)


async def test_body_and_auth_reach_upstream_untouched() -> None:
    router = respx.Router()
    route = router.post(f"{UPSTREAM}/v1/chat/completions").respond(200, json={"ok": True})
    body = b'{ "model":"m",  "messages":[{"role":"user","content":"h\\u00e9"}] ,"x":1.50}\n'
    async with proxied(router_transport(router)) as (client, _):
        r = await client.post(
            "/v1/chat/completions",
            content=body,
            headers={"authorization": "Bearer sk-client", "x-custom": "A b", "content-type": "application/json"},
        )
    assert r.status_code == 200 and r.json() == {"ok": True}
    sent = route.calls.last.request
    assert sent.content == body  # not re-serialised: spacing, escapes, number format kept
    assert sent.headers["authorization"] == "Bearer sk-client"
    assert sent.headers["x-custom"] == "A b"
    assert sent.headers["host"] == "engine.test:8000"
    assert sent.headers["content-length"] == str(len(body))


async def test_non_json_body_is_forwarded_not_rejected() -> None:
    router = respx.Router()
    route = router.post(f"{UPSTREAM}/v1/completions").respond(400, json={"error": {"message": "bad json"}})
    async with proxied(router_transport(router)) as (client, _):
        r = await client.post("/v1/completions", content=b"\x00\xffnot json{")
    assert route.calls.last.request.content == b"\x00\xffnot json{"
    assert r.status_code == 400 and r.json() == {"error": {"message": "bad json"}}


async def test_hop_by_hop_headers_dropped_both_ways() -> None:
    router = respx.Router()
    route = router.get(f"{UPSTREAM}/v1/models").respond(
        200,
        content=b'{"data":[]}',
        headers={
            "content-type": "application/json",
            "x-engine": "vllm",
            "keep-alive": "timeout=5",
            "connection": "x-secret-hop",
            "x-secret-hop": "1",
            "set-cookie": "s=1",
        },
    )
    async with proxied(router_transport(router)) as (client, _):
        r = await client.get(
            "/v1/models",
            headers={
                "connection": "x-client-hop",
                "x-client-hop": "1",
                "proxy-authorization": "Basic zzz",
                "te": "trailers",
                "x-keep": "yes",
            },
        )
    sent = route.calls.last.request.headers
    for name in ("x-client-hop", "proxy-authorization", "te"):
        assert name not in sent
    assert sent["x-keep"] == "yes"
    assert r.headers["x-engine"] == "vllm" and r.headers["set-cookie"] == "s=1"
    assert "keep-alive" not in r.headers and "x-secret-hop" not in r.headers
    assert r.content == b'{"data":[]}'


@pytest.mark.parametrize("status", [400, 401, 404, 422, 429, 500, 503])
async def test_upstream_errors_forwarded_unchanged(status: int) -> None:
    body = json.dumps({"error": {"message": f"engine says {status}", "type": "x", "code": status}}).encode()
    router = respx.Router()
    router.post(f"{UPSTREAM}/v1/chat/completions").respond(
        status, content=body, headers={"content-type": "application/json", "retry-after": "3"}
    )
    async with proxied(router_transport(router)) as (client, _app):
        r = await client.post("/v1/chat/completions", content=b"{}")
        metrics = (await client.get("/metrics")).text
    assert (r.status_code, r.content, r.headers["retry-after"]) == (status, body, "3")
    cls = f"{status // 100}xx"
    assert f'cachescout_requests_total{{code_class="{cls}",route="/v1/chat/completions"}} 1.0' in metrics
    assert 'cachescout_upstream_errors_total{kind="connect"} 0.0' in metrics


async def test_catch_all_forwards_any_path_method_and_query() -> None:
    router = respx.Router()
    tok = router.put(f"{UPSTREAM}/tokenize", params={"a": "1", "b": "x y"}).respond(201, text="tok")
    ver = router.get(f"{UPSTREAM}/version").respond(200, json={"version": "0.x"})
    dele = router.delete(f"{UPSTREAM}/v1/files/abc").respond(204)
    wrong = router.get(f"{UPSTREAM}/v1/chat/completions").respond(405, json={"detail": "Method Not Allowed"})
    async with proxied(router_transport(router)) as (client, _):
        r1 = await client.put("/tokenize?a=1&b=x%20y", content=b"raw")
        r2 = await client.get("/version")
        r3 = await client.delete("/v1/files/abc")
        r4 = await client.get("/v1/chat/completions")  # wrong method on a known route still reaches the engine
    assert (r1.status_code, r1.text) == (201, "tok") and tok.calls.last.request.content == b"raw"
    assert r2.json() == {"version": "0.x"} and ver.called
    assert r3.status_code == 204 and dele.called
    assert r4.status_code == 405 and wrong.called  # the engine decides, not the proxy


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (httpx.ConnectError("refused"), 502, "connect"),
        (httpx.ConnectTimeout("slow connect"), 504, "timeout"),
        (httpx.ReadTimeout("slow read"), 504, "timeout"),
        (httpx.PoolTimeout("pool full"), 504, "timeout"),
        (httpx.RemoteProtocolError("garbage"), 502, "protocol"),
    ],
)
async def test_upstream_failures_become_openai_errors(exc: Exception, status: int, kind: str) -> None:
    router = respx.Router()
    route = router.post(f"{UPSTREAM}/v1/chat/completions").mock(side_effect=exc)
    async with proxied(router_transport(router)) as (client, _):
        r = await client.post("/v1/chat/completions", content=b"{}")
        metrics = (await client.get("/metrics")).text
    assert r.status_code == status
    err = r.json()["error"]
    assert set(err) == {"message", "type", "code"} and kind in err["message"]
    assert route.call_count == 1  # never retried: a request is not duplicated
    assert f'cachescout_upstream_errors_total{{kind="{kind}"}} 1.0' in metrics
    assert 'cachescout_requests_total{code_class="5xx",route="/v1/chat/completions"} 1.0' in metrics


async def test_body_over_limit_is_413_without_reaching_upstream() -> None:
    router = respx.Router()
    route = router.post(f"{UPSTREAM}/v1/embeddings").respond(200)
    async with proxied(router_transport(router), max_body_bytes=100) as (client, _):
        declared = await client.post("/v1/embeddings", content=b"x" * 101)

        async def chunks():  # no content-length: the limit is enforced while reading
            for _ in range(5):
                yield b"y" * 30

        streamed = await client.post("/v1/embeddings", content=chunks())
        ok = await client.post("/v1/embeddings", content=b"z" * 100)
    for r in (declared, streamed):
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    assert ok.status_code == 200 and route.call_count == 1


class Recorder:
    """An observer that records every hook call, and may fail on command."""

    def __init__(self, fail: bool = False, mutate: bool = False) -> None:
        self.calls: list[tuple] = []
        self.fail = fail
        self.mutate = mutate

    def on_request(self, ctx) -> None:
        self.calls.append(("request", ctx.method, ctx.path, ctx.body, ctx.json, ctx.headers.get("authorization")))
        if self.mutate:
            ctx.headers["authorization"] = "stolen"  # type: ignore[index]
            ctx.json = {"evil": True}
        if self.fail:
            raise RuntimeError("policy bug")

    def on_response_start(self, ctx, status, headers, now) -> None:
        self.calls.append(("start", status, headers.get("content-type")))
        if self.fail:
            raise RuntimeError("policy bug")

    def on_response_chunk(self, ctx, chunk, now) -> None:
        self.calls.append(("chunk", chunk))
        if self.fail:
            raise RuntimeError("policy bug")

    def on_response_end(self, ctx, error, now) -> None:
        self.calls.append(("end", error))
        if self.fail:
            raise RuntimeError("policy bug")


async def test_observer_sees_request_and_response() -> None:
    router = respx.Router()
    router.post(f"{UPSTREAM}/v1/chat/completions").respond(
        200, content=b'{"id":"x"}', headers={"content-type": "application/json"}
    )
    obs = Recorder()
    body = b'{"model": "m", "messages": []}'
    async with proxied(router_transport(router), observer=obs) as (client, app):
        assert app.state.observer is obs
        await client.post("/v1/chat/completions", content=body, headers={"Authorization": "Bearer k"})
        await client.post("/v1/chat/completions", content=b"plain text")
    assert obs.calls[0] == ("request", "POST", "/v1/chat/completions", body, {"model": "m", "messages": []}, "Bearer k")
    assert obs.calls[1] == ("start", 200, "application/json")
    assert obs.calls[2] == ("chunk", b'{"id":"x"}')
    assert obs.calls[3] == ("end", None)
    assert obs.calls[4][4] is None  # not JSON: no parsed copy, still forwarded


async def test_failing_or_meddling_observer_never_changes_the_response() -> None:
    router = respx.Router()
    route = router.post(f"{UPSTREAM}/v1/chat/completions").respond(200, content=b"exact bytes")
    for obs in (Recorder(fail=True), Recorder(mutate=True)):
        async with proxied(router_transport(router), observer=obs) as (client, _):
            r = await client.post("/v1/chat/completions", content=b'{"a":1}', headers={"authorization": "Bearer k"})
            metrics = (await client.get("/metrics")).text
        assert (r.status_code, r.content) == (200, b"exact bytes")
        sent = route.calls.last.request
        assert sent.content == b'{"a":1}' and sent.headers["authorization"] == "Bearer k"
        expected = "4.0" if obs.fail else "0.0"
        assert f"cachescout_policy_errors_total {expected}" in metrics


async def test_observer_told_about_upstream_failure() -> None:
    router = respx.Router()
    router.post(f"{UPSTREAM}/v1/chat/completions").mock(side_effect=httpx.ConnectError("down"))
    obs = Recorder()
    async with proxied(router_transport(router), observer=obs) as (client, _):
        await client.post("/v1/chat/completions", content=b"{}")
    assert obs.calls[-1] == ("end", "upstream_connect")


async def test_livez_and_cached_readyz() -> None:
    now = [100.0]
    router = respx.Router()
    health = router.get(f"{UPSTREAM}/health").respond(200)
    async with proxied(router_transport(router), clock=lambda: now[0], readiness_cache_seconds=5) as (client, _):
        assert (await client.get("/livez")).json() == {"status": "ok"}
        for _ in range(3):
            assert (await client.get("/readyz")).status_code == 200
        assert health.call_count == 1  # cached
        health.respond(503)
        now[0] += 6
        r = await client.get("/readyz")
        assert r.status_code == 503 and r.json()["status"] == "unready"


async def test_readyz_unreachable_upstream() -> None:
    router = respx.Router()
    router.get(f"{UPSTREAM}/health").mock(side_effect=httpx.ConnectError("refused"))
    async with proxied(router_transport(router)) as (client, _):
        r = await client.get("/readyz")
    assert r.status_code == 503 and "unreachable" in r.json()["detail"]


async def test_readyz_falls_back_to_models() -> None:
    router = respx.Router()
    router.get(f"{UPSTREAM}/health").respond(404)
    router.get(f"{UPSTREAM}/v1/models").respond(200, json={"data": []})
    async with proxied(router_transport(router)) as (client, _):
        assert (await client.get("/readyz")).status_code == 200


class FakeLive:
    def __init__(self) -> None:
        self.observer = Recorder()
        self.started = self.stopped = False

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def engine_info(self) -> dict:
        return {"engine": "fake"}

    def debug_state(self) -> dict:
        return {"agents": 0}


async def test_debug_routes_need_the_admin_token() -> None:
    router = respx.Router()
    live = FakeLive()
    async with proxied(router_transport(router), live=live, admin_token="tok") as (client, app):
        assert live.started and app.state.live is live and app.state.observer is live.observer
        assert (await client.get("/debug/state")).status_code == 401
        assert (await client.get("/debug/state", headers={"authorization": "Bearer nope"})).status_code == 403
        r = await client.get("/debug/state", headers={"authorization": "Bearer tok"})
        assert (r.status_code, r.json()) == (200, {"agents": 0})
        r = await client.get("/debug/engine", headers={"x-admin-token": "tok"})
        assert (r.status_code, r.json()) == (200, {"engine": "fake"})
        assert set((await client.get("/debug/engine")).json()["error"]) == {"message", "type", "code"}
    assert live.stopped
    async with proxied(router_transport(router), live=FakeLive()) as (client, _):
        assert (await client.get("/debug/state", headers={"authorization": "Bearer tok"})).status_code == 404


@pytest.mark.parametrize("failure", ["import", "build", "start"])
async def test_policy_failure_is_fail_open(monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    import sys
    import types

    module = types.ModuleType("proxy.runtime.live")
    built: list[dict] = []

    class Live(FakeLive):
        async def start(self) -> None:
            if failure == "start":
                raise RuntimeError("engine probe failed")
            await super().start()

    def build_live(**kwargs):
        built.append(kwargs)
        if failure == "build":
            raise ValueError("bad policy config")
        return Live()

    if failure == "import":
        monkeypatch.setitem(sys.modules, "proxy.runtime.live", None)  # makes the import raise ImportError
    else:
        module.build_live = build_live
        monkeypatch.setitem(sys.modules, "proxy.runtime.live", module)
    router = respx.Router()
    router.post(f"{UPSTREAM}/v1/chat/completions").respond(200, content=b"fine")
    async with proxied(router_transport(router), policy_enabled=True) as (client, app):
        r = await client.post("/v1/chat/completions", content=b"{}")
        assert (r.status_code, r.content) == (200, b"fine")
        assert app.state.live is None
        assert type(app.state.observer).__name__ == "NullObserver"
    if failure != "import":
        assert set(built[0]) == {"settings", "client", "metrics", "clock"}


async def test_policy_built_from_settings_when_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    module = types.ModuleType("proxy.runtime.live")
    live = FakeLive()
    module.build_live = lambda **kw: live
    monkeypatch.setitem(sys.modules, "proxy.runtime.live", module)
    router = respx.Router()
    router.post(f"{UPSTREAM}/v1/completions").respond(200, content=b"ok")
    async with proxied(router_transport(router), policy_enabled=True) as (client, app):
        await client.post("/v1/completions", content=b'{"prompt": "p"}')
        assert app.state.live is live and live.started
    assert [c[0] for c in live.observer.calls] == ["request", "start", "chunk", "end"]
    assert live.stopped


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    request_body=st.binary(max_size=2048),
    response_body=st.binary(max_size=2048),
    status=st.sampled_from([200, 201, 400, 404, 500, 502]),
)
async def test_bytes_roundtrip_exactly(request_body: bytes, response_body: bytes, status: int) -> None:
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(status, content=response_body, headers={"content-type": "application/octet-stream"})

    async with proxied(httpx.MockTransport(handler)) as (client, _):
        r = await client.post("/v1/chat/completions", content=request_body)
    assert seen == [request_body]
    assert (r.status_code, r.content) == (status, response_body)


async def test_opt_in_body_rewrite_only_when_the_observer_asks() -> None:
    router = respx.Router()
    route = router.post(f"{UPSTREAM}/v1/chat/completions").respond(200, content=b"ok")

    class Rewriter(Recorder):
        def __init__(self, result) -> None:
            super().__init__()
            self.result = result

        def rewrite_body(self, ctx):
            if isinstance(self.result, Exception):
                raise self.result
            return self.result

    original = b'{"model": "m"}'
    for result, expected, errors in (
        (b'{"model":"m","priority":7}', b'{"model":"m","priority":7}', "0.0"),
        (None, original, "0.0"),
        (RuntimeError("bug"), original, "1.0"),
    ):
        async with proxied(router_transport(router), observer=Rewriter(result)) as (client, _):
            r = await client.post("/v1/chat/completions", content=original)
            metrics = (await client.get("/metrics")).text
        sent = route.calls.last.request
        assert r.content == b"ok" and sent.content == expected
        assert sent.headers["content-length"] == str(len(expected))
        assert f"cachescout_policy_errors_total {errors}" in metrics


async def test_route_label_is_bounded_and_own_paths_stay_local() -> None:
    router = respx.Router()
    router.route(host="engine.test").respond(200, content=b"engine")
    async with proxied(router_transport(router)) as (client, _):
        for i in range(5):
            await client.get(f"/random/{i}")
        assert (await client.head("/v1/models")).status_code == 200
        metrics = (await client.get("/metrics")).text
    assert 'cachescout_requests_total{code_class="2xx",route="other"} 5.0' in metrics
    assert 'cachescout_requests_total{code_class="2xx",route="/v1/models"} 1.0' in metrics
    assert "/random/" not in metrics
    assert router.calls.call_count == 6  # /metrics itself was not forwarded


async def test_streamed_chunks_reach_the_observer_in_order() -> None:
    chunks = [b'data: {"n":1}\n\n', b'data: {"n":2}\n\n', b"data: [DONE]\n\n"]

    class Stream(httpx.AsyncByteStream):
        async def __aiter__(self):
            for c in chunks:
                yield c

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Stream())

    obs = Recorder()
    async with proxied(httpx.MockTransport(handler), observer=obs) as (client, _):
        r = await client.post("/v1/chat/completions", content=b'{"stream": true}')
    assert r.content == b"".join(chunks)
    assert [c[1] for c in obs.calls if c[0] == "chunk"] == chunks


async def test_upstream_failure_mid_stream_cuts_the_client() -> None:
    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield b'data: {"n":1}\n\n'
            raise httpx.ReadError("engine died")

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Broken())

    obs = Recorder()
    async with proxied(httpx.MockTransport(handler), observer=obs) as (client, _):
        # The app must not complete the response; ASGITransport reports that with an AssertionError
        # (on a real server the connection is closed: see test_e2e_sockets).
        with pytest.raises((httpx.HTTPError, AssertionError)):
            async with client.stream("POST", "/v1/chat/completions", content=b"{}") as r:
                await r.aread()
        metrics = (await client.get("/metrics")).text
    assert obs.calls[-1] == ("end", "upstream_protocol")
    assert 'cachescout_upstream_errors_total{kind="protocol"} 1.0' in metrics


async def test_client_disconnect_ends_observer_once_and_closes_upstream() -> None:
    """Drive the ASGI app directly: the client disconnects while the engine is still streaming."""
    import asyncio

    closed = asyncio.Event()

    class Slow(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield b"data: 1\n\n"
            await asyncio.sleep(30)
            yield b"data: never\n\n"

        async def aclose(self) -> None:
            closed.set()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Slow())

    obs = Recorder()
    async with proxied(httpx.MockTransport(handler), observer=obs) as (_, app):
        disconnect = asyncio.Event()
        messages = [{"type": "http.request", "body": b"{}", "more_body": False}]
        sent: list[dict] = []

        async def receive() -> dict:
            if messages:
                return messages.pop(0)
            await disconnect.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)
            if message.get("body") == b"data: 1\n\n":
                disconnect.set()

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/chat/completions",
            "raw_path": b"/v1/chat/completions",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json")],
            "asgi": {"version": "3.0"},
        }
        await asyncio.wait_for(app(scope, receive, send), timeout=5)
        metrics = app.state.metrics.render()[0].decode()
    assert closed.is_set()
    assert [c for c in obs.calls if c[0] == "end"] == [("end", "client_disconnect")]
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert 'cachescout_requests_total{code_class="4xx",route="/v1/chat/completions"} 1.0' in metrics
    assert "cachescout_inflight_requests 0.0" in metrics


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings"])
async def test_each_openai_route_is_forwarded_under_its_own_label(path: str) -> None:
    router = respx.Router()
    route = router.post(f"{UPSTREAM}{path}").respond(200, json={"object": "ok"})
    async with proxied(router_transport(router)) as (client, _):
        r = await client.post(path, content=b'{"model":"m"}')
        metrics = (await client.get("/metrics")).text
    assert r.json() == {"object": "ok"} and route.called
    assert f'cachescout_requests_total{{code_class="2xx",route="{path}"}} 1.0' in metrics
    assert f'cachescout_upstream_first_byte_seconds_count{{route="{path}"}} 1.0' in metrics
    assert f'cachescout_request_duration_seconds_count{{route="{path}"}} 1.0' in metrics


class HeaderRecorder(Recorder):
    """An observer that also adds headers (`contracts.HeaderAdder`), or fails doing so."""

    def __init__(self, pairs: list[tuple[str, str]] | None, fail_headers: bool = False) -> None:
        super().__init__()
        self.pairs = pairs
        self.fail_headers = fail_headers

    def forward_headers(self, ctx) -> list[tuple[str, str]] | None:
        if self.fail_headers:
            raise RuntimeError("policy bug")
        return self.pairs


async def test_added_headers_go_upstream_and_never_replace_the_clients() -> None:
    router = respx.Router()
    route = router.post(f"{UPSTREAM}/v1/chat/completions").respond(200, content=b"ok")
    pairs = [("X-Session-ID", "cs-1"), ("x-vllm-priority", "5"), ("x-bad", "a\r\nb"), ("host", "evil")]
    async with proxied(router_transport(router), observer=HeaderRecorder(pairs)) as (client, _):
        await client.post("/v1/chat/completions", content=b'{"a":1}')
        sent = route.calls.last.request
        assert sent.headers["x-session-id"] == "cs-1" and sent.headers["x-vllm-priority"] == "5"
        assert "x-bad" not in sent.headers and sent.headers["host"] != "evil"  # no smuggling, no hop headers
        assert sent.content == b'{"a":1}'
        await client.post("/v1/chat/completions", content=b'{"a":1}', headers={"X-Session-ID": "mine"})
        sent = route.calls.last.request
        assert sent.headers.get_list("x-session-id") == ["mine"]  # the client's own id, alone


async def test_a_failing_header_hook_forwards_the_clients_headers() -> None:
    router = respx.Router()
    route = router.post(f"{UPSTREAM}/v1/chat/completions").respond(200, content=b"ok")
    async with proxied(router_transport(router), observer=HeaderRecorder(None, fail_headers=True)) as (client, _):
        r = await client.post("/v1/chat/completions", content=b'{"a":1}')
        metrics = (await client.get("/metrics")).text
    assert (r.status_code, r.content) == (200, b"ok")
    assert "x-session-id" not in route.calls.last.request.headers
    assert "cachescout_policy_errors_total 1.0" in metrics
