"""Run the proxy (with its live policy) on a real loopback socket, in a background thread.

Why: the acceptance tests and `cachescout demo` must exercise the real path — client socket →
forwarder → engine socket, warmups on their own connections — not an in-memory transport. The
server binds 127.0.0.1 on an ephemeral port and stops (saving state, stopping the executor) on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI

from proxy.harness.uvicorn_thread import serve_in_thread
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
def run_proxy_server(
    settings: Settings, startup_timeout: float = 15.0, **app_kwargs: Any
) -> Iterator[ProxyServerHandle]:
    app = create_app(settings, **app_kwargs)
    with serve_in_thread(app, name="proxy", startup_timeout=startup_timeout) as srv:
        yield ProxyServerHandle(f"http://127.0.0.1:{srv.port}", srv.port, app, srv.loop)
