"""The one httpx.AsyncClient that talks to the engine, built with explicit limits and timeouts.

Why explicit: httpx's defaults (5 s read timeout, 100 connections) cut long generations and cap
concurrency silently. Why aiohttp under httpx by default: the rest of the code keeps httpx's API,
but httpcore's pool bookkeeping costs several times more CPU per request than aiohttp's connector
(measured in benchmarks/overhead.py; `CACHESCOUT_UPSTREAM_TRANSPORT=httpx` switches back).

Idle connections expire before the engine's own keep-alive does (`upstream_keepalive_s`, 4 s; vLLM's
`VLLM_HTTP_TIMEOUT_KEEP_ALIVE` and uvicorn's `timeout_keep_alive` are 5 s), so the pool rarely offers
a connection the engine is closing. An engine or a load balancer with a shorter idle timeout than
that still closes connections the pool thinks alive: a request sent as it does so got a 502 (issue
39: 11 of 40 at a 50 ms idle timeout). So the aiohttp transport's connector records, per request,
whether the connection it handed out was reused and how many bytes came back on it
(`_ReuseAwareConnector`, `UpstreamAttempt`); the forwarder sends the request once more, on a fresh
connection, only when a reused connection was closed or reset before any response byte arrived
(`UpstreamAttempt.retry_reason`, docs/hardening.md "Engine idle timeouts").

Both transports are configured to add nothing of their own to the forwarded request (no default
User-Agent / Accept / Accept-Encoding / Content-Type, no cookies, no env proxies, no decompression),
so the engine sees the client's headers.

The forwarder sends through the client's transport (`handle_async_request`, httpx's public transport
API) rather than `client.send`: the client layer adds auth, redirect, event-hook and cookie-jar
handling that a proxy must not apply, and its cookie extraction alone cost ~10% of the proxy's CPU.
Other users of the client (readiness probe, live policy) use the client normally.
"""

from __future__ import annotations

import errno
import functools
from contextvars import ContextVar
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx

from proxy.settings import Settings

AIOHTTP_SKIP_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")


def client_limits(settings: Settings) -> httpx.Limits:
    return httpx.Limits(
        max_connections=settings.max_connections,
        max_keepalive_connections=settings.max_keepalive_connections,
        keepalive_expiry=settings.upstream_keepalive_s,
    )


def client_timeout(settings: Settings) -> httpx.Timeout:
    return httpx.Timeout(
        connect=settings.connect_timeout,
        read=settings.read_timeout,
        write=settings.write_timeout,
        pool=settings.pool_timeout,
    )


class UpstreamAttempt:
    """One send of a request to the engine, as the connector saw it: whether the connection was
    reused from the pool, and the bytes its protocol had received when it was handed out (so a
    failure can tell "not one response byte came back" from a reply cut short)."""

    __slots__ = ("protocol", "received0", "reused")

    def __init__(self) -> None:
        self.protocol: Any = None
        self.received0 = 0
        self.reused = False

    def retry_reason(self, exc: BaseException) -> str | None:
        """ "closed" / "reset" when `exc` (from `handle_async_request`, so before the response head
        was complete) is the engine dropping a *reused* connection before sending any byte of a
        response; None for anything else (a fresh connection, a timeout, a refused connection, any
        byte received, an exception of ours, a transport that does not count bytes)."""
        proto = self.protocol
        if not self.reused or proto is None or proto.cs_received != self.received0:
            return None
        try:
            import aiohttp
        except ImportError:  # pragma: no cover - the counting connector needs aiohttp anyway
            return None
        # httpx-aiohttp raises an httpx error from aiohttp's, which may wrap the OS-level one
        # (ClientOSError(None, "Can not write request body") from "Cannot write to closing
        # transport"): look down the chain, a few links at most
        seen: BaseException | None = exc
        for _ in range(4):
            if seen is None:
                break
            if isinstance(seen, aiohttp.ClientConnectorError | aiohttp.ServerTimeoutError | TimeoutError):
                return None  # never connected, or the engine may still be working on it
            if isinstance(seen, aiohttp.ServerDisconnectedError):
                return "closed"
            if isinstance(seen, ConnectionError) or (isinstance(seen, OSError) and seen.errno in _RESET_ERRNOS):
                return "reset"
            seen = seen.__cause__ if seen.__cause__ is not None else seen.__context__
        return None


_RESET_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})

# The attempt the forwarder is making in this task (set around `handle_async_request`; the
# connector's `connect` runs in the same task, so it finds it here). None: nobody is asking.
UPSTREAM_ATTEMPT: ContextVar[UpstreamAttempt | None] = ContextVar("cachescout_upstream_attempt", default=None)


@functools.cache
def _reuse_aware_connector_class() -> type:
    """aiohttp's TCPConnector, plus: its protocols count the bytes they receive, and `connect`
    tells the current `UpstreamAttempt` which protocol it handed out and whether it was reused.
    Built lazily (aiohttp is optional). The byte count is a Python add per received chunk; the
    reuse check an attribute read per request."""
    import aiohttp
    from aiohttp.client_proto import ResponseHandler

    class CountingHandler(ResponseHandler):
        cs_received = 0  # bytes received on this connection, ever
        cs_handouts = 0  # requests this connection was handed out for

        def data_received(self, data: bytes) -> None:
            self.cs_received += len(data)
            super().data_received(data)

    class ReuseAwareConnector(aiohttp.TCPConnector):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            factory: Any = getattr(self, "_factory", None)
            # aiohttp builds its protocols with `partial(ResponseHandler, loop=loop)`; if a version
            # changes that, nothing counts bytes and `retry_reason` never retries (fail safe).
            self.counts_bytes = isinstance(factory, functools.partial) and factory.func is ResponseHandler
            if self.counts_bytes:
                counting: Any = functools.partial(CountingHandler, *factory.args, **factory.keywords)
                self._factory = counting

        async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
            conn = await super().connect(req, traces, timeout)
            attempt = UPSTREAM_ATTEMPT.get()
            proto = conn.protocol
            if isinstance(proto, CountingHandler):
                if attempt is not None:
                    attempt.protocol = proto
                    attempt.reused = proto.cs_handouts > 0
                    attempt.received0 = proto.cs_received
                proto.cs_handouts += 1
            return conn

    return ReuseAwareConnector


def _aiohttp_transport(settings: Settings, fresh: bool = False) -> httpx.AsyncBaseTransport:
    """httpx-aiohttp transport with a session that adds no headers; call inside the event loop.
    `fresh`: every request on a new connection, closed after it (the retry's transport)."""
    import aiohttp
    from httpx_aiohttp import AiohttpTransport

    connector = _reuse_aware_connector_class()(
        limit=settings.max_connections,
        limit_per_host=0,
        keepalive_timeout=None if fresh else settings.upstream_keepalive_s,
        force_close=fresh,
        ttl_dns_cache=300,
    )
    session = aiohttp.ClientSession(
        connector=connector,
        # engine reply header limits: aiohttp's defaults (8190-byte lines, 128 fields) are below what
        # the engines' own servers send and clients accept, so valid replies became 502s
        max_line_size=settings.upstream_max_header_line_bytes,
        max_field_size=settings.upstream_max_header_line_bytes,
        max_headers=settings.upstream_max_headers,
        skip_auto_headers=AIOHTTP_SKIP_AUTO_HEADERS,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
    )
    # aiohttp resends idempotent requests itself after a reused connection failed (on whatever
    # connection the pool gives next, uncounted); the forwarder's one counted retry replaces that
    if hasattr(session, "_retry_connection"):
        session._retry_connection = False
    return AiohttpTransport(client=session, limits=client_limits(settings), trust_env=False)


def build_retry_transport(settings: Settings) -> httpx.AsyncBaseTransport | None:
    """The transport for the one resend after a reused connection was dropped (a new connection
    for each request), or None where the configured transport cannot tell a reused connection
    that returned no byte (httpx/httpcore: its pool does not count bytes per request)."""
    if settings.upstream_transport != "aiohttp" or not settings.upstream_retry_idle_close:
        return None
    try:
        return _aiohttp_transport(settings, fresh=True)
    except ImportError:
        return None


def build_transport(settings: Settings) -> httpx.AsyncBaseTransport:
    """The configured transport (aiohttp unless asked otherwise or not installed). Call inside the loop."""
    if settings.upstream_transport == "aiohttp":
        try:
            return _aiohttp_transport(settings)
        except ImportError:
            pass
    return httpx.AsyncHTTPTransport(limits=client_limits(settings), trust_env=False)


def build_client(settings: Settings, transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    """The engine-facing client, over `transport` (tests: respx / MockTransport / ASGITransport)."""
    if transport is None:
        transport = build_transport(settings)
    no_cookies = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
    return httpx.AsyncClient(
        transport=transport,
        timeout=client_timeout(settings),
        limits=client_limits(settings),
        trust_env=False,
        follow_redirects=False,
        cookies=no_cookies,
    )
