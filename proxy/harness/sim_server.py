"""Run the simulated engine on a real loopback socket, in a background thread.

Why: end-to-end tests (proxy → sim over HTTP), the demo and notebooks need a live engine URL
without spawning a subprocess. The server binds 127.0.0.1 on an ephemeral port and stops on exit.

    with run_sim_server(SimConfig(speed=0, capacity_blocks=512)) as sim:
        httpx.post(sim.url + "/v1/completions", json={...})
        sim.service.engine.pool.stats()
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from fastapi import FastAPI

from proxy.harness.uvicorn_thread import serve_in_thread
from proxy.simengine.server import create_sim_app
from proxy.simengine.service import SimConfig, SimService


@dataclass(frozen=True)
class SimServerHandle:
    url: str  # e.g. "http://127.0.0.1:41234" (no trailing slash)
    port: int
    app: FastAPI
    service: SimService  # the live engine (block pool, counters); touch it only while idle


@contextlib.contextmanager
def run_sim_server(
    config: SimConfig | None = None,
    clock: Callable[[], float] | None = None,
    startup_timeout: float = 10.0,
    host: str = "127.0.0.1",
) -> Iterator[SimServerHandle]:
    """Start the sim engine with uvicorn in a daemon thread; yield its handle; stop it on exit."""
    app = create_sim_app(config or SimConfig(), clock)
    with serve_in_thread(
        app, name="simulated engine", host=host, startup_timeout=startup_timeout, shutdown_timeout=10.0
    ) as srv:
        yield SimServerHandle(f"http://{host}:{srv.port}", srv.port, app, app.state.sim)
