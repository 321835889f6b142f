"""Engines (or load balancers) that close idle keep-alive connections sooner than the proxy expects
(issue 39), and clients that leave the proxy's own routes mid-body, against the real
`cachescout serve`.

The engine here (`idle_close_upstream.py`) is a real TCP server that closes a connection
0 / 50 / 200 ms after its last reply, with a FIN or a RST (SO_LINGER 0). A request the proxy sends
on such a connection as it closes never got a byte back; the proxy resends it once on a new
connection (`proxy/http/forwarder.py`), so a well-behaved client sees only 200s. Before, 11 of 40
one-at-a-time requests got a 502 at a 50 ms idle timeout (issue 39's probe).
"""

from __future__ import annotations

import contextlib
import random
import socket
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from proxy.harness.child_process import child_process, free_port

from .conftest import GOOD, HERE, proxy
from .test_connections import _metric

pytestmark = pytest.mark.sockets

CHAT = "/v1/chat/completions"


@contextlib.contextmanager
def idle_engine(idle_ms: float, close: str, lazy: bool = False) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, str(HERE / "idle_close_upstream.py"), "--port", str(port)]
    cmd += ["--idle-ms", str(idle_ms), "--close", close] + (["--lazy"] if lazy else [])
    with child_process(cmd, url + "/health"):
        yield url


def _body(i: int) -> bytes:
    return b'{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"question ' + str(i).encode() + b'"}]}'


def one_at_a_time(url: str, n: int, gaps_s: list[float], seed: int = 0) -> list[int]:
    """`n` requests, each after the previous answer, separated by gaps drawn from `gaps_s` (the
    client keeps its own connection to the proxy: only the proxy's upstream side is at stake)."""
    rng = random.Random(seed)
    statuses = []
    with httpx.Client(timeout=30) as c:
        for i in range(n):
            statuses.append(c.post(url + CHAT, content=_body(i), headers=GOOD).status_code)
            time.sleep(rng.choice(gaps_s))
    return statuses


def _retries(px) -> dict[str, float]:
    return _metric(httpx.get(px.url + "/metrics").text, "cachescout_upstream_retries_total")


@pytest.mark.parametrize("close", ["fin", "rst"])
def test_requests_on_connections_the_engine_is_closing_are_resent_once(tmp_path, close):
    """A server that notices an expired connection only when the next request arrives (no timer):
    every reuse after the idle timeout is closed unanswered, so the resend path runs on every such
    request, deterministically. All answers are 200, each resend is counted once, by its reason."""
    with idle_engine(30, close, lazy=True) as eng, proxy(eng, tmp_path, log_level="info") as px:
        statuses = one_at_a_time(px.url, 12, [0.08])  # every gap past the engine's 30 ms
        retries = _retries(px)
        engine = httpx.get(eng + "/stats").json()  # a direct, new connection: answered
        log = px.log_text()
    assert statuses == [200] * 12
    reason = "closed" if close == "fin" else "reset"
    # a request on a fresh pooled connection is answered; the next one finds it expired and is
    # resent on a new connection that is not pooled, so the one after opens a fresh pooled one:
    # every other request is resent, each exactly once (one resend per unanswered close)
    answered = sum(v for k, v in retries.items() if 'outcome="answered"' in k)
    assert answered >= 4, retries
    assert answered == engine["closed_unanswered"], (retries, engine)
    assert any(reason in k and v > 0 for k, v in retries.items()), retries
    assert not any('outcome="failed"' in k and v > 0 for k, v in retries.items()), retries
    assert "resent once on a new connection" in log
    assert "Traceback" not in log


@pytest.mark.parametrize("close", ["fin", "rst"])
@pytest.mark.parametrize("idle_ms", [0, 50, 200])
def test_short_engine_idle_timeouts_cost_clients_nothing(tmp_path, close, idle_ms):
    """The issue's probe, with a timer closing idle connections: gaps around the timeout make the
    proxy reuse connections as they close. 0 non-200 answers."""
    idle = idle_ms / 1000
    gaps = [0.0, 0.005, max(idle - 0.005, 0.0), idle, idle + 0.002, idle + 0.01]
    with idle_engine(idle_ms, close) as eng, proxy(eng, tmp_path) as px:
        statuses = one_at_a_time(px.url, 40, gaps, seed=idle_ms)
        log = px.log_text()
    assert [s for s in statuses if s != 200] == []
    assert "Traceback" not in log


def test_no_resend_after_a_response_byte_or_on_a_state_changing_route(tmp_path, engine_url):
    """The resend is only for requests the engine never answered, on a reused connection, on
    routes that only compute: a reply cut after its first bytes is not resent (the 502 stands),
    nor a POST to a route that changes engine state; and a resend is never resent again."""
    with idle_engine(30, "fin", lazy=True) as eng, proxy(eng, tmp_path) as px, httpx.Client(timeout=30) as c:
        assert c.get(px.url + "/health").status_code == 200  # opens the pooled connection
        assert c.get(px.url + "/partial").status_code == 502  # reused, 11 bytes then FIN: no resend
        assert sum(_retries(px).values()) == 0
        assert c.post(px.url + "/v1/load_lora_adapter", content=b"{}").status_code == 200
        time.sleep(0.08)
        # reused connection, expired: not an inference route, so the 502 stands, nothing counted
        assert c.post(px.url + "/v1/load_lora_adapter", content=b"{}").status_code == 502
        assert sum(_retries(px).values()) == 0
    with proxy(engine_url, tmp_path) as px, httpx.Client(timeout=30) as c:
        assert c.get(px.url + "/v1/models").status_code == 200  # opens a pooled connection
        # reused, closed unanswered: resent once on a new connection, which is closed too: the
        # client gets the 502, the resend is counted as failed, and there is no third attempt
        assert c.get(px.url + "/reset").status_code == 502
        retries = _retries(px)
        assert retries.get('{outcome="failed",reason="closed"}', 0) == 1, retries
        assert sum(retries.values()) == 1


def test_client_leaving_the_hints_route_mid_body_logs_one_line(engine_url, tmp_path):
    """A client that announces more body than it sends on the hints route and hangs up: one log
    line, no 'Exception in ASGI application' traceback (issue 39 item 5)."""
    with proxy(engine_url, tmp_path, log_level="info") as px:
        host, port = px.url.removeprefix("http://").split(":")
        for _ in range(3):
            s = socket.create_connection((host, int(port)))
            s.sendall(
                b"POST /v1/cachescout/hints HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b'content-length: 5000\r\n\r\n{"hints": ['
            )
            time.sleep(0.2)
            s.close()
        time.sleep(0.5)
        assert httpx.get(px.url + "/livez").status_code == 200
        log = px.log_text()
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]
    assert log.count("client disconnected before its request body was complete") == 3, log[-3000:]
