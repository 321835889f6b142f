"""`create_app`: the proxy as one ASGI app, its state owned by the lifespan.

The lifespan owns the single engine-facing httpx.AsyncClient (connections are pooled across all
requests) and, when the policy is enabled, the live policy object built by
`proxy.runtime.live.build_live`. The policy is optional by design (fail-open): if it cannot be
imported or fails to build/start, the proxy logs one line and forwards with a `NullObserver`, so a
policy bug can cost cache hits but never availability.

Test hooks: `transport` replaces the network (respx / httpx.MockTransport / ASGITransport), `clock`
replaces time.monotonic, `observer` / `live` replace the policy. `app.state` exposes `settings`,
`metrics`, `forwarder`, `client`, `observer`, `live`. ASGITransport does not run lifespans: wrap
test requests in `async with app.router.lifespan_context(app):`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from proxy.contracts import RequestObserver
from proxy.http.forwarder import Forwarder
from proxy.http.health import ReadinessProbe
from proxy.http.observer import NullObserver
from proxy.http.routes import OWN_PATHS, add_forwarded_routes, add_own_routes
from proxy.http.upstream import build_client, build_retry_transport, build_transport, client_timeout
from proxy.observability.metrics import ProxyMetrics
from proxy.settings import Settings, load_settings

log = logging.getLogger("cachescout.app")


class ProxyApp(FastAPI):
    """FastAPI for the proxy's own endpoints; forwarded requests skip its middleware stack.

    Every forwarded request would otherwise pass five middleware layers and the router (about a
    fifth of the proxy's CPU per request, measured); the forwarder handles its own errors, so they
    add nothing there. The routes registered for forwarded paths remain, as documentation and for
    anything that calls the router directly.
    """

    forwarder: Forwarder | None = None
    own_paths: frozenset[str] = frozenset(OWN_PATHS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.forwarder is not None and scope["path"] not in self.own_paths:
            await self.forwarder(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def _build_live(
    settings: Settings, client: httpx.AsyncClient, metrics: ProxyMetrics, clock: Callable[[], float]
) -> Any | None:
    try:
        from proxy.runtime.live import build_live
    except ImportError as exc:
        log.warning("cache policy unavailable (%s); forwarding without it", exc)
        return None
    try:
        return build_live(settings=settings, client=client, metrics=metrics, clock=clock)
    except Exception as exc:  # noqa: BLE001 - fail open
        log.error("cache policy failed to build (%s: %s); forwarding without it", type(exc).__name__, exc)
        return None


async def _client_disconnected(request: Request, exc: Exception) -> Response:
    """A client that left before its request body was complete, on any route of the proxy's own
    (the hints route reads bodies; the server's 408 for a lying Content-Length ends the same way).
    One line, never a traceback: the client did this, not the proxy, and nothing was applied. The
    response goes nowhere (uvicorn drops writes to a closed connection); 499 is nginx's convention."""
    log.info("client disconnected before its request body was complete: %s %s", request.method, request.url.path)
    return Response(status_code=499)


def create_app(
    settings: Settings | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] | None = None,
    observer: RequestObserver | None = None,
    live: Any | None = None,
) -> FastAPI:
    """Build the proxy app. Nothing touches the network until the lifespan starts."""
    settings = settings if settings is not None else load_settings()
    clock = clock if clock is not None else time.monotonic
    metrics = ProxyMetrics(CollectorRegistry())
    forwarder = Forwarder(settings.upstream_url, settings.max_body_bytes, metrics, clock)
    forwarder.timeout_ext = client_timeout(settings).as_dict()
    forwarder.inline_parse_bytes = settings.policy_inline_parse_bytes
    forwarder.stream_body_bytes = max(settings.policy_max_body_bytes, 1024 * 1024)
    probe = ReadinessProbe(
        settings.upstream_url,
        settings.readiness_cache_seconds,
        clock,
        probe_timeout=min(2.0, settings.connect_timeout + 1.0),
    )
    token = settings.admin_token.get_secret_value() if settings.admin_token is not None else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        upstream_transport = transport if transport is not None else build_transport(settings)
        client = build_client(settings, upstream_transport)
        forwarder.transport = upstream_transport
        # the one resend after an engine dropped a reused connection unanswered (not with a test transport)
        retry_transport = build_retry_transport(settings) if transport is None else None
        forwarder.retry_transport = retry_transport
        app.state.client = client
        live_obj = live
        if live_obj is None and observer is None and settings.policy_enabled:
            live_obj = _build_live(settings, client, metrics, clock)
        if live_obj is not None:
            try:
                await live_obj.start()
            except Exception as exc:  # noqa: BLE001 - fail open
                log.error("cache policy failed to start (%s: %s); forwarding without it", type(exc).__name__, exc)
                live_obj = None
        obs: RequestObserver = observer if observer is not None else NullObserver()
        if observer is None and live_obj is not None:
            try:
                obs = live_obj.observer
            except Exception as exc:  # noqa: BLE001
                log.error("cache policy has no observer (%s); forwarding without it", exc)
        forwarder.observer = obs
        app.state.live = live_obj
        app.state.observer = obs
        health = None
        if settings.health_port:
            from proxy.http.health_port import HealthPort

            health = HealthPort(settings.host, settings.health_port, settings.health_stall_s)
            health.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            if health is not None:
                health.stop()
            forwarder.observer = NullObserver()
            if live_obj is not None:
                try:
                    await live_obj.stop()
                except Exception as exc:  # noqa: BLE001
                    log.error("cache policy failed to stop cleanly: %s", exc)
            await client.aclose()
            if retry_transport is not None:
                forwarder.retry_transport = None
                await retry_transport.aclose()

    app = ProxyApp(title="CacheScout", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.add_exception_handler(ClientDisconnect, _client_disconnected)
    app.forwarder = forwarder
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.forwarder = forwarder
    app.state.client = None
    app.state.live = live
    app.state.observer = observer
    add_own_routes(app, probe, token)
    add_forwarded_routes(app, forwarder)
    return app
