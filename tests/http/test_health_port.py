"""The health port's `/livez` (proxy/http/health_port.py): a child process, a heartbeat from the
event loop, 503 once the loop stalls, gone when the proxy stops."""

from __future__ import annotations

import asyncio
import http.client
import socket
import time

import pytest

from proxy.harness.child_process import free_port
from proxy.http.health_port import NOT_FOUND, OK, STALLED, HealthPort, answer

pytestmark = pytest.mark.sockets


def test_answer():
    assert answer(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n", 10.0, 5.0, 12.0) is OK
    assert answer(b"HEAD /livez?x=1 HTTP/1.1\r\n\r\n", 10.0, 5.0, 12.0) is OK
    assert answer(b"GET /livez HTTP/1.1\r\n\r\n", 10.0, 5.0, 15.5) is STALLED
    assert answer(b"GET /readyz HTTP/1.1\r\n\r\n", 10.0, 5.0, 12.0) is NOT_FOUND
    assert answer(b"garbage\r\n\r\n", 10.0, 5.0, 12.0) is NOT_FOUND


def _get(port: int, path: str = "/livez") -> int:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path)
        return c.getresponse().status
    finally:
        c.close()


def test_livez_from_a_child_process_503_when_the_loop_stalls_and_gone_with_the_proxy():
    port = free_port()

    async def main() -> tuple[list[int], HealthPort]:
        hp = HealthPort("127.0.0.1", port, stall_s=0.8)
        hp.start(asyncio.get_running_loop())
        statuses = []
        for _ in range(50):  # the child starts (the port is bound already: connections wait)
            await asyncio.sleep(0.1)
            statuses.append(await asyncio.to_thread(_get, port))
            if statuses[-1] == 200:
                break
        statuses.append(await asyncio.to_thread(_get, port, "/metrics"))
        time.sleep(1.5)  # the event loop is wedged: no heartbeat
        statuses.append(_get(port))  # answered by the child while the loop is still stuck
        await asyncio.sleep(0.7)  # the loop runs again: beats resume
        statuses.append(await asyncio.to_thread(_get, port))
        hp.stop()
        return statuses, hp

    statuses, hp = asyncio.run(main())
    assert statuses[-4:] == [200, 404, 503, 200], statuses
    assert hp.proc is not None and hp.proc.poll() is not None  # the child is gone
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


def test_idle_sockets_do_not_hold_the_health_port():
    port = free_port()

    async def main() -> int:
        hp = HealthPort("127.0.0.1", port, stall_s=5)
        hp.start(asyncio.get_running_loop())
        try:
            await asyncio.sleep(0.5)
            idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
            status = await asyncio.to_thread(_get, port)
            for s in idle:
                s.close()
            return status
        finally:
            hp.stop()

    assert asyncio.run(main()) == 200
