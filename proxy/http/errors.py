"""Errors the proxy itself produces, in the OpenAI shape clients already parse.

Only failures *of the proxy's own hop* become proxy errors: unreachable upstream (502), upstream
timeout (504), body too large (413), admin auth (401/403/404). An upstream 4xx/5xx is a valid
response and is forwarded byte for byte, never rewritten here.

`classify_upstream_error` maps an exception from the httpx client (whichever transport is under it)
to one of the `cachescout_upstream_errors_total{kind}` labels and an HTTP status. httpx-aiohttp maps
aiohttp's connection errors to httpx exception classes coarsely (a refused connection surfaces as
`httpx.ConnectTimeout`), so the original aiohttp exception in `__cause__` is consulted first.
"""

from __future__ import annotations

import asyncio
import json
import re

import httpx

try:  # aiohttp is optional: only the httpx-aiohttp transport brings it
    import aiohttp
except ImportError:  # pragma: no cover - exercised only without aiohttp installed
    aiohttp = None  # type: ignore[assignment]


def error_body(message: str, type_: str, code: str | int | None = None) -> bytes:
    """`{"error": {"message", "type", "code"}}` as compact JSON bytes."""
    return json.dumps({"error": {"message": message, "type": type_, "code": code}}, separators=(",", ":")).encode()


def error_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]


async def send_error(send, status: int, message: str, type_: str, code: str | int | None = None) -> None:
    """Send a complete OpenAI-style error response on a raw ASGI `send`."""
    body = error_body(message, type_, code)
    await send({"type": "http.response.start", "status": status, "headers": error_headers(body)})
    await send({"type": "http.response.body", "body": body, "more_body": False})


# (status, kind label, OpenAI error type, code) per failure kind.
UPSTREAM_FAILURES: dict[str, tuple[int, str, str]] = {
    "connect": (502, "upstream_unreachable", "bad_gateway"),
    "timeout": (504, "upstream_timeout", "gateway_timeout"),
    "protocol": (502, "upstream_protocol_error", "bad_gateway"),
    "other": (502, "upstream_error", "bad_gateway"),
}


def classify_upstream_error(exc: BaseException) -> str:
    """One of connect | timeout | protocol | other."""
    cause = exc.__cause__
    if aiohttp is not None and cause is not None:
        if isinstance(cause, (aiohttp.ServerTimeoutError, asyncio.TimeoutError, TimeoutError)):
            return "timeout"
        if isinstance(cause, aiohttp.ClientConnectorError):
            return "connect"
        if isinstance(
            cause, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientResponseError)
        ):
            return "protocol"
        if isinstance(cause, aiohttp.ClientOSError):
            return "connect"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return "connect"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.LocalProtocolError)):
        return "protocol"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timeout"
    if isinstance(exc, (ConnectionError, OSError)):
        return "connect"
    return "other"


_URL_QUERY = re.compile(r"((?:https?://)?[^\s'\"?#]*/[^\s'\"?#]*)[?#][^\s'\"]*")


def describe_upstream_error(exc: BaseException) -> str:
    """The error for 502/504 bodies and logs: its text with any URL's query string and fragment cut
    (aiohttp/httpx messages embed the request URL, and a query may carry a key or user data)."""
    text = str(exc) or type(exc).__name__
    return _URL_QUERY.sub(r"\1", text)[:500]
