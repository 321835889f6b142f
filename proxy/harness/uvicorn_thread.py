"""Serve an ASGI app with uvicorn on a real loopback socket, in a background thread.

Why: end-to-end tests, the demo and notebooks need live engine and proxy URLs on real sockets
(streaming cadence and disconnects only exist there) without spawning subprocesses. One helper for
both the simulated engine and the proxy, so start-up, port discovery and shutdown behave the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn


@dataclass(frozen=True)
class ThreadedServer:
    port: int
    loop: asyncio.AbstractEventLoop  # the server's event loop (the app's state lives there)


@contextlib.contextmanager
def serve_in_thread(
    app: Any, *, name: str, host: str = "127.0.0.1", startup_timeout: float = 10.0, shutdown_timeout: float = 15.0
) -> Iterator[ThreadedServer]:
    """Start `app` on an ephemeral port of `host`; yield its port and loop; stop it on exit."""
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=0, log_level="warning", lifespan="on", access_log=False)
    )
    loops: list[asyncio.AbstractEventLoop] = []

    def _serve() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loops.append(loop)
        try:
            loop.run_until_complete(server.serve())
        finally:
            loop.close()

    thread = threading.Thread(target=_serve, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(timeout=5)
            raise RuntimeError(f"{name} did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield ThreadedServer(port, loops[0])
    finally:
        server.should_exit = True
        thread.join(timeout=shutdown_timeout)
