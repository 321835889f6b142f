"""The fault suite (issue 13): hostile clients, a hostile engine, corrupt state — against the real
`cachescout serve` process. Each case checks that what the client gets is byte-identical to going
direct where direct succeeds, that the proxy still serves afterwards, and (where memory is the
point) that its RSS stays within a stated bound. Loopback only; sized to run in well under a
minute on 2 cores (the full-size memory figures are `benchmarks/hardening.py`)."""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import time

import httpx
import pytest

from .conftest import GOOD, livez_probe, proxy, upstream

pytestmark = pytest.mark.sockets

CHAT = "/v1/chat/completions"


def chat_body(sid: str, text: str, **extra) -> bytes:
    return json.dumps(
        {
            "model": "m",
            "user": sid,
            "max_tokens": 8,
            **extra,
            "messages": [
                {"role": "system", "content": "You are the fault-suite agent. " * 20},
                {"role": "user", "content": text},
            ],
        }
    ).encode()


def same(direct: httpx.Response, proxied: httpx.Response) -> None:
    assert (proxied.status_code, proxied.content) == (direct.status_code, direct.content)


def livez_ok(url: str) -> None:
    assert httpx.get(url + "/livez", timeout=10).status_code == 200


# --- security: the engine's verdict decides what is learned ---------------------------------------
def test_rejected_clients_never_drive_actions(engine_url, tmp_path):
    with proxy(engine_url, tmp_path, "policy_r_min=0.0", 'policy_overrides={"r_min_transitions": 0}') as px:
        with httpx.Client(timeout=30) as c:
            for k in range(60):  # two alternating agents, wrong key: the engine says 401 to all
                body = chat_body(f"s{k % 6}", f"turn {k} " * 50)
                d = c.post(engine_url + CHAT, content=body, headers={"authorization": "Bearer bad"})
                p = c.post(px.url + CHAT, content=body, headers={"authorization": "Bearer bad"})
                same(d, p)
                assert p.status_code == 401
            time.sleep(0.6)  # a few plan ticks
            st = px.state()
            assert st["observer"]["rejected"] == 60 and st["observer"]["observed"] == 0
            assert st["agents"] == [] and st["stats"]["sessions"] == 0
            assert sum(st["stats"]["actions_emitted"].values()) == 0
            metrics = c.get(px.url + "/metrics").text
            assert 'cachescout_policy_skipped_total{reason="rejected"} 60.0' in metrics
            for k in range(6):  # the same traffic with a valid key is learned
                body = chat_body(f"g{k}", "hello", cache_salt="tenant-salt-SECRET")
                assert c.post(px.url + CHAT, content=body, headers=GOOD).status_code == 200
            time.sleep(0.3)
            st = px.state()
            assert st["observer"]["observed"] == 6 and {a["tenant"] for a in st["agents"]} == {"salt:18c"}
            assert "SECRET" not in json.dumps(st) and "SECRET" not in px.log_text()


def test_auth_allow_list_gates_learning(engine_url, tmp_path):
    import hashlib

    allowed = hashlib.sha256(b"Bearer nobody").hexdigest()
    with proxy(engine_url, tmp_path, f'policy_client_auth_sha256=["{allowed}"]') as px:
        with httpx.Client(timeout=30) as c:
            for k in range(5):
                assert c.post(px.url + CHAT, content=chat_body("a", f"x{k}"), headers=GOOD).status_code == 200
            time.sleep(0.3)
            obs = px.state()["observer"]
    assert obs["not_allowed"] == 5 and obs["observed"] == 0


# --- a hostile engine --------------------------------------------------------------------------------
def test_engine_replies_pass_through_or_fail_cleanly(engine_url, tmp_path):
    with proxy(engine_url, tmp_path) as px, httpx.Client(timeout=30) as c:
        for path in ("/huge-headers", "/500"):  # > 8,190-byte header line, 300 fields; a 5xx
            d, p = c.get(engine_url + path), c.get(px.url + path)
            same(d, p)
        p = c.get(px.url + "/huge-headers")
        assert len(p.headers["x-big"]) == 16384 and p.headers["x-h299"] == "299"
        p = c.get(px.url + "/reset?key=SECRET")  # reset before any byte: an OpenAI-style 502
        assert p.status_code == 502 and "SECRET" not in p.text
        deep = chat_body("d", "deep", deep=True)  # a 200k-deep JSON reply
        same(c.post(engine_url + CHAT, content=deep, headers=GOOD), c.post(px.url + CHAT, content=deep, headers=GOOD))
        time.sleep(0.3)
        livez_ok(px.url)
        log = px.log_text()
    assert "Traceback" not in log and "SECRET" not in log


def test_engine_down_gives_502_without_query_string(tmp_path):
    from proxy.harness.child_process import free_port

    with proxy(f"http://127.0.0.1:{free_port()}", tmp_path) as px:
        p = httpx.get(px.url + "/v1/models?api_key=SECRET", timeout=30)
        log = px.log_text()
    assert p.status_code == 502 and p.json()["error"]["code"] == "bad_gateway"
    assert "SECRET" not in p.text and "SECRET" not in log


def test_stalled_and_trickling_engines(engine_url, tmp_path):
    with proxy(engine_url, tmp_path, "read_timeout=1") as px, httpx.Client(timeout=30) as c:
        same(c.get(engine_url + "/trickle"), c.get(px.url + "/trickle"))
        t0 = time.monotonic()
        with pytest.raises(httpx.HTTPError):  # stalled after the headers: the connection is cut
            c.get(px.url + "/stall").read()
        assert time.monotonic() - t0 < 10
        livez_ok(px.url)


def test_oversize_malformed_bodies_and_client_disconnects(engine_url, tmp_path):
    with proxy(engine_url, tmp_path, "max_body_bytes=1000000") as px, httpx.Client(timeout=30) as c:
        r = c.post(px.url + CHAT, content=b"{" + b" " * 2_000_000, headers=GOOD)
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        for bad in (b'{"messages": [', b"\xff\xfe not json", b"[" * 100_000, b'{"model": 1e999999}'):
            same(c.post(engine_url + "/echo", content=bad), c.post(px.url + "/echo", content=bad))
            same(
                c.post(engine_url + CHAT, content=bad, headers={"authorization": "Bearer bad"}),
                c.post(px.url + CHAT, content=bad, headers={"authorization": "Bearer bad"}),
            )
        for _ in range(20):  # clients that leave mid-stream
            with c.stream("POST", px.url + CHAT, content=chat_body("ns", "s", nosep=True), headers=GOOD) as r:
                next(r.iter_raw())
        livez_ok(px.url)
        time.sleep(0.5)
        same(c.get(engine_url + "/v1/models"), c.get(px.url + "/v1/models"))
        assert "Traceback" not in px.log_text()


def test_corrupt_state_files_are_refused_whole_and_the_proxy_starts(engine_url, tmp_path):
    from proxy.core import ScoutPolicy
    from proxy.core.snapshot import KIND, VERSION

    good = {
        "kind": KIND,
        "version": VERSION,
        "tenants": {
            "": {
                "agents": [
                    ["0123456789ab", "00000000000000ff", 0, 100, 3, 1.0, [1.0], []],
                    ["0123456789ac", "00000000000000fe", 30_000_000, 100, 3, 1.0, [1.0], []],
                ]
            }
        },
    }
    cases = {
        "huge-slot.json": json.dumps(good),
        "not-json.json": "{oops",
        "deep.json": "[" * 200_000 + "]" * 200_000,
        "huge.json": json.dumps({"kind": KIND, "pad": "x" * (8 << 20)}),
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        t0 = time.monotonic()
        with proxy(engine_url, tmp_path, f"state_path={path}") as px:
            started = time.monotonic() - t0
            st = px.state()
            livez_ok(px.url)
            log = px.log_text()
        assert st["agents"] == [] and st["state_loaded_from"] is None, name
        assert "ignoring state file" in log and "Traceback" not in log, (name, log[-500:])
        assert started < 30, (name, started)
    p = ScoutPolicy()
    p.restore({"kind": KIND, "version": VERSION, "tenants": {}})  # an empty file is fine


# --- hostile clients ---------------------------------------------------------------------------------
def _raw(url: str, data: bytes, wait: float = 5.0) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as s:
        try:
            s.sendall(data)
        except OSError:
            pass
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except OSError:
            pass
        return out


def test_header_floods_long_urls_and_slowloris(engine_url, tmp_path):
    with proxy(engine_url, tmp_path, "server_header_timeout_s=1", "server_max_connections=40") as px:
        rss0 = px.rss_mb()
        big = b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-a: " + b"a" * (8 << 20)  # unfinished 8 MiB header
        assert _raw(px.url, big).startswith(b"HTTP/1.1 431")
        many = b"GET /v1/models HTTP/1.1\r\n" + b"".join(b"x-%d: 1\r\n" % i for i in range(300)) + b"\r\n"
        assert _raw(px.url, many).startswith(b"HTTP/1.1 431")
        assert _raw(px.url, b"GET /" + b"u" * 40000 + b" HTTP/1.1\r\n").startswith(b"HTTP/1.1 414")
        t0 = time.monotonic()  # slowloris: never finishes its headers
        assert _raw(px.url, b"GET /v1/models HTTP/1.1\r\nhost: x\r\n", wait=10).startswith(b"HTTP/1.1 408")
        assert time.monotonic() - t0 < 5
        host, port = px.url.removeprefix("http://").split(":")
        idle = [socket.create_connection((host, int(port))) for _ in range(60)]  # more than the cap
        try:
            time.sleep(1.5)  # silent ones are closed
            livez_ok(px.url)
            assert sum(1 for s in idle if _closed(s)) >= 40
        finally:
            for s in idle:
                s.close()
        same(httpx.get(engine_url + "/v1/models"), httpx.get(px.url + "/v1/models"))
        assert px.rss_mb() < rss0 + 64  # nothing of the floods is kept


def _closed(s: socket.socket) -> bool:
    s.settimeout(2)
    try:
        return s.recv(4096) is not None  # b"" (closed) or a 408/503 reply then close
    except OSError:
        return True


def test_livez_stays_fast_while_huge_bodies_and_separatorless_streams_pass(engine_url, tmp_path):
    big = chat_body("big", "y" * (50 << 20))  # a 50 MB body, built beforehand
    nosep = chat_body("ns", "s", nosep=True)  # 16 MiB without a line end back
    with proxy(engine_url, tmp_path) as px:

        async def load() -> tuple[int, int]:
            async with httpx.AsyncClient(timeout=120) as c:

                async def stream() -> int:
                    n = 0
                    async with c.stream("POST", px.url + CHAT, content=nosep, headers=GOOD) as r:
                        async for chunk in r.aiter_raw():
                            n += len(chunk)
                    return n

                r1, n = await asyncio.gather(c.post(px.url + CHAT, content=big, headers=GOOD), stream())
                return r1.status_code, n

        with livez_probe(px.url, tmp_path) as lat:
            status, n = asyncio.run(load())
        assert status == 200 and n == 16 << 20
        p99 = statistics.quantiles(lat, n=100)[98] if len(lat) >= 20 else max(lat)
        # the acceptance figure (p99 < 50 ms) comes from benchmarks/hardening.py on a quiet machine;
        # here, on a loaded CI box, only a stall (the old quadratic tap: seconds) fails the test
        assert p99 < 0.5, (p99, len(lat))
        st = px.state()["observer"]
        assert st["body_too_large"] == 1
        import hashlib

        for data in (big, big[: 5 << 20], big[: 1 << 20]):  # relayed as chunks / as one body
            r = httpx.post(px.url + "/echo-sha", content=data, timeout=60).json()
            assert r == {"sha256": hashlib.sha256(data).hexdigest(), "length": len(data)}


# --- memory --------------------------------------------------------------------------------------------
def test_memory_bounded_with_1mb_prompts(engine_url, tmp_path):
    """CI variant: 120 sessions x 1 MB prompts with a 32 MiB session budget (the full 1,000-session
    run with the default 128 MiB budget is benchmarks/hardening.py)."""
    with proxy(engine_url, tmp_path, 'policy_overrides={"session_max_bytes": 33554432}') as px:
        rss0 = px.rss_mb()
        with httpx.Client(timeout=60) as c:
            for k in range(120):
                text = f"session {k}: " + "".join(f"w{k}x{j} " for j in range(120_000))[:1_000_000]
                assert c.post(px.url + CHAT, content=chat_body(f"m{k}", text), headers=GOOD).status_code == 200
        time.sleep(1.0)
        rss = px.rss_mb()
        st = px.state()
    assert st["observer"]["observed"] == 120
    assert rss - rss0 < 150, (rss0, rss)  # before: ~2.2 MB kept per session (264 MB here)


def test_memory_bounded_against_a_queued_engine(tmp_path):
    """CI variant: 1,500 new sessions, half of them n=2 (fan-out parents parked), engine queue 10."""
    with upstream(waiting=10) as url, proxy(url, tmp_path, engine="vllm") as px:
        rss0 = px.rss_mb()

        async def drive() -> None:
            async with httpx.AsyncClient(timeout=60) as c:
                sem = asyncio.Semaphore(16)

                async def one(k: int) -> None:
                    async with sem:
                        body = chat_body(f"q{k}", f"task {k} " * 400, n=2 if k % 2 else 1)
                        r = await c.post(px.url + CHAT, content=body, headers=GOOD)
                        assert r.status_code == 200

                await asyncio.gather(*(one(k) for k in range(1500)))

        asyncio.run(drive())
        time.sleep(0.6)
        rss = px.rss_mb()
        st = px.state()
    assert st["observer"]["observed"] == 1500
    assert sum(st["stats"]["actions_emitted"].values()) == 0  # queue > max_engine_waiting: no actions
    assert rss - rss0 < 120, (rss0, rss)
