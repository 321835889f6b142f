"""Run the simulated engine on a real loopback socket, in a background thread.

Why: end-to-end tests (proxy → sim over HTTP), the demo and notebooks need a live engine URL
without spawning a subprocess. The server binds 127.0.0.1 on an ephemeral port and stops on exit.

    with run_sim_server(SimConfig(speed=0, capacity_blocks=512)) as sim:
        httpx.post(sim.url + "/v1/completions", json={...})
        sim.service.engine.pool.stats()
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI

from proxy.sim.server import create_sim_app
from proxy.sim.service import SimConfig, SimService


@dataclass(frozen=True)
class SimServerHandle:
    url: str                 # e.g. "http://127.0.0.1:41234" (no trailing slash)
    port: int
    app: FastAPI
    service: SimService      # the live engine (block pool, counters); touch it only while idle


@contextlib.contextmanager
def run_sim_server(config: SimConfig | None = None, clock: Callable[[], float] | None = None,
                   startup_timeout: float = 10.0, host: str = "127.0.0.1") -> Iterator[SimServerHandle]:
    """Start the sim engine with uvicorn in a daemon thread; yield its handle; stop it on exit."""
    app = create_sim_app(config or SimConfig(), clock)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=0, log_level="warning", lifespan="on",
                                           access_log=False))
    thread = threading.Thread(target=server.run, name="cachescout-sim-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(timeout=5)
            raise RuntimeError("simulated engine did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield SimServerHandle(f"http://{host}:{port}", port, app, app.state.sim)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
