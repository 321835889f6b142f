"""Liveness and readiness.

`/livez` answers from the process alone: if the event loop runs, the proxy is alive (restart it
otherwise). `/readyz` says whether requests would succeed *now*: it probes the upstream (`/health`,
which vLLM and SGLang serve; `/v1/models` when `/health` does not exist). The result is
cached for `readiness_cache_seconds` and concurrent probes are collapsed into one, so a tight
Kubernetes probe loop or a dashboard cannot turn into load on the engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import httpx

PROBE_PATHS = ("/health", "/v1/models")


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    detail: str
    checked_at: float


class ReadinessProbe:
    """Cached upstream reachability check."""

    def __init__(
        self, upstream_url: str, cache_seconds: float, clock: Callable[[], float], probe_timeout: float = 2.0
    ) -> None:
        self.base = upstream_url.rstrip("/")
        self.cache_seconds = cache_seconds
        self.clock = clock
        self.timeout = httpx.Timeout(probe_timeout)
        self._last: Readiness | None = None
        self._lock = asyncio.Lock()

    async def check(self, client: httpx.AsyncClient) -> Readiness:
        last = self._last
        if last is not None and self.clock() - last.checked_at < self.cache_seconds:
            return last
        async with self._lock:  # one probe at a time; latecomers reuse its answer
            last = self._last
            if last is not None and self.clock() - last.checked_at < self.cache_seconds:
                return last
            self._last = await self._probe(client)
            return self._last

    async def _probe(self, client: httpx.AsyncClient) -> Readiness:
        detail = "no probe path answered"
        for path in PROBE_PATHS:
            try:
                request = httpx.Request("GET", self.base + path, extensions={"timeout": self.timeout.as_dict()})
                response = await client.send(request)
            except httpx.HTTPError as exc:
                # Unreachable: trying the next path would fail the same way.
                return Readiness(False, f"upstream unreachable: {type(exc).__name__}: {exc}", self.clock())
            if 200 <= response.status_code < 300:
                return Readiness(True, f"GET {path} -> {response.status_code}", self.clock())
            detail = f"GET {path} -> {response.status_code}"
            if response.status_code not in (404, 405):
                break  # the engine answered "not healthy"; only a missing endpoint means "ask elsewhere"
        return Readiness(False, detail, self.clock())
