"""Which paths the proxy answers itself, and which it forwards.

The proxy owns only `/livez`, `/readyz`, `/metrics`, `/debug/*` and `POST /v1/cachescout/hints`.
Everything else, in any method, goes to the engine: the OpenAI routes are listed explicitly (they
are the contract, and their route label in metrics is their own path), and a catch-all forwards
engine extras (`/tokenize`, `/health`, `/version`, `/docs` ...). The upstream's own `/metrics` is
therefore not reachable through the proxy; scrape the engine directly.

`/debug/*` exposes learned state (agent ids, anchors), so it is admin-only: with no admin token
configured it does not exist (404); otherwise `Authorization: Bearer <token>` or `X-Admin-Token`.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.routing import Route

from proxy.http.errors import error_body
from proxy.http.forwarder import Forwarder
from proxy.http.health import ReadinessProbe
from proxy.observability.metrics import KNOWN_ROUTES

ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
OPENAI_ROUTES: dict[str, list[str]] = {
    "/v1/chat/completions": ["POST"],
    "/v1/completions": ["POST"],
    "/v1/responses": ["POST"],
    "/v1/embeddings": ["POST"],
    "/v1/models": ["GET"],
}
assert set(OPENAI_ROUTES) == set(KNOWN_ROUTES), "metric route labels and forwarded routes must agree"
HINTS_PATH = "/v1/cachescout/hints"  # runtime hints (proxy/runtime/hint_inputs.py, docs/hints.md)
OWN_PATHS = ("/livez", "/readyz", "/metrics", "/debug/engine", "/debug/state", HINTS_PATH)


def _error(status: int, message: str, type_: str, code: str) -> Response:
    return Response(error_body(message, type_, code), status_code=status, media_type="application/json")


def check_admin(request: Request, token: str | None) -> Response | None:
    """None when the caller may proceed, else the error response to send."""
    if token is None:
        return _error(404, "not found", "invalid_request_error", "not_found")
    given = request.headers.get("x-admin-token")
    if given is None:
        auth = request.headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        given = value.strip() if scheme.lower() == "bearer" else None
    if not given:
        return _error(
            401,
            "admin token required (Authorization: Bearer <token> or X-Admin-Token)",
            "authentication_error",
            "unauthorized",
        )
    if not hmac.compare_digest(given.encode(), token.encode()):
        return _error(403, "admin token rejected", "permission_error", "forbidden")
    return None


def add_own_routes(app: FastAPI, probe: ReadinessProbe, admin_token: str | None) -> None:
    @app.get("/livez", include_in_schema=False)
    async def livez() -> Response:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        result = await probe.check(app.state.client)
        body = {"status": "ready" if result.ready else "unready", "detail": result.detail}
        return JSONResponse(body, status_code=200 if result.ready else 503)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        payload, content_type = app.state.metrics.render()
        return Response(payload, media_type=content_type)

    def _debug(request: Request, what: str) -> Response:
        denied = check_admin(request, admin_token)
        if denied is not None:
            return denied
        live = app.state.live
        if live is None:
            return _error(503, "the cache policy is not running", "service_unavailable", "policy_disabled")
        data: Any = live.engine_info() if what == "engine" else live.debug_state()
        return JSONResponse(data)

    @app.post(HINTS_PATH, include_in_schema=False)
    async def hints(request: Request) -> Response:
        live = app.state.live
        service = getattr(live, "hints", None) if live is not None else None
        if service is None:
            return _error(
                503,
                "runtime hints are not accepted (cache policy off or hints_enabled=false)",
                "service_unavailable",
                "hints_disabled",
            )
        raw = await _read_limited(request, service.max_body_bytes)
        if raw is None:
            return _error(
                413,
                f"hint body larger than {service.max_body_bytes} bytes",
                "invalid_request_error",
                "request_too_large",
            )
        try:
            status, body = service.handle(raw, request.headers, live.clock())
        except Exception:  # noqa: BLE001 - a hint bug must not become a 500 with a traceback
            if app.state.metrics is not None:
                app.state.metrics.policy_errors_total.inc()
            return _error(
                500, "hint processing failed (counted in cachescout_policy_errors_total)", "server_error", "hint_error"
            )
        return JSONResponse(body, status_code=status)

    @app.get("/debug/engine", include_in_schema=False)
    async def debug_engine(request: Request) -> Response:
        return _debug(request, "engine")

    @app.get("/debug/state", include_in_schema=False)
    async def debug_state(request: Request) -> Response:
        return _debug(request, "state")


async def _read_limited(request: Request, limit: int) -> bytes | None:
    """The body, or None as soon as it exceeds ``limit`` bytes (memory stays bounded)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def add_forwarded_routes(app: FastAPI, forwarder: Forwarder) -> None:
    """Raw ASGI routes (no FastAPI request handling) to the forwarder; catch-all last."""
    for path, methods in OPENAI_ROUTES.items():
        app.router.routes.append(Route(path, endpoint=forwarder, methods=methods, include_in_schema=False))
    app.router.routes.append(Route("/{path:path}", endpoint=forwarder, methods=ALL_METHODS, include_in_schema=False))
