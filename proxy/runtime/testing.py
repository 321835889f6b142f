"""Run the proxy (with its live policy) on a real loopback socket, in a background thread.

Why: the acceptance tests and `cachescout demo` must exercise the real path — client socket →
forwarder → engine socket, warmups on their own connections — not an in-memory transport. The
server binds 127.0.0.1 on an ephemeral port and stops (saving state, stopping the executor) on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI

from proxy.http.app import create_app
from proxy.settings import Settings


@dataclass(frozen=True)
class ProxyServerHandle:
    url: str
    port: int
    app: FastAPI
    loop: asyncio.AbstractEventLoop

    @property
    def live(self) -> Any:
        return self.app.state.live

    def call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Run `fn()` (sync or returning an awaitable) on the proxy's loop; state lives there."""
        async def _run() -> Any:
            out = fn()
            if asyncio.iscoroutine(out):
                out = await out
            return out
        return asyncio.run_coroutine_threadsafe(_run(), self.loop).result(timeout)


@contextlib.contextmanager
def run_proxy_server(settings: Settings, startup_timeout: float = 15.0, **app_kwargs: Any) -> Iterator[ProxyServerHandle]:
    app = create_app(settings, **app_kwargs)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on",
                                           access_log=False))
    loops: list[asyncio.AbstractEventLoop] = []

    def _serve() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loops.append(loop)
        loop.run_until_complete(server.serve())
        loop.close()

    thread = threading.Thread(target=_serve, name="cachescout-proxy-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(timeout=5)
            raise RuntimeError("proxy did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield ProxyServerHandle(f"http://127.0.0.1:{port}", port, app, loops[0])
    finally:
        server.should_exit = True
        thread.join(timeout=15)
