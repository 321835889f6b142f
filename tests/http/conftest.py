"""Fixtures for the proxy tests: in-process apps over ASGITransport, and real processes on sockets."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from proxy.harness.child_process import child_process, free_port
from proxy.http.app import create_app
from proxy.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = "http://engine.test:8000"


@contextlib.asynccontextmanager
async def proxied(transport: httpx.AsyncBaseTransport, **kwargs) -> AsyncIterator[tuple[httpx.AsyncClient, object]]:
    """A proxy app in front of `transport`, with its lifespan running; yields (client, app)."""
    settings_kw = {"upstream_url": UPSTREAM, "policy_enabled": False}
    app_kw = {k: kwargs.pop(k) for k in ("clock", "observer", "live") if k in kwargs}
    settings_kw.update(kwargs)
    app = create_app(Settings(**settings_kw), transport=transport, **app_kw)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://proxy.test") as client:
            yield client, app


@contextlib.contextmanager
def process(args: list[str], ready_url: str, env: dict | None = None) -> Iterator[subprocess.Popen]:
    """A real process on loopback; any answer below 500 counts as up (the fake upstream's /health)."""
    with child_process(
        args, ready_url, env=env, cwd=REPO_ROOT, timeout=20.0, ready=lambda status: status < 500
    ) as proc:
        yield proc


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with process([sys.executable, "-m", "tests.http.fake_upstream", "--port", str(port)], url + "/health"):
        yield url


@pytest.fixture(scope="module")
def proxy_url(upstream_url: str) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [
        sys.executable,
        "-m",
        "proxy.cli",
        "serve",
        "--upstream",
        upstream_url,
        "--port",
        str(port),
        "--no-policy",
        "--log-level",
        "warning",
    ]
    with process(args, url + "/livez"):
        yield url


@pytest.fixture(scope="module")
def policy_proxy_url(upstream_url: str) -> Iterator[str]:
    """The proxy as users run it by default: cache policy on (whatever engine it detects)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [
        sys.executable,
        "-m",
        "proxy.cli",
        "serve",
        "--upstream",
        upstream_url,
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    with process(args, url + "/livez"):
        yield url
