"""Fixtures for the simulated engine tests: an in-process ASGI client on a fast sim."""

import httpx
import pytest

from proxy.simengine.server import create_sim_app
from proxy.simengine.service import SimConfig

MODEL = "sim-llama-3.1-8b"


def make_client(**overrides) -> httpx.AsyncClient:
    cfg = SimConfig(**{"speed": 0, "capacity_blocks": 2048, "output_tokens": 12, **overrides})
    app = create_sim_app(cfg)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim")
    client.sim = app.state.sim
    return client


@pytest.fixture
async def client():
    c = make_client()
    yield c
    await c.sim.close()
    await c.aclose()
