"""The one httpx.AsyncClient that talks to the engine, built with explicit limits and timeouts.

Why explicit: httpx's defaults (5 s read timeout, 100 connections) cut long generations and cap
concurrency silently. Why aiohttp under httpx by default: the rest of the code keeps httpx's API,
but httpcore's pool bookkeeping costs several times more CPU per request than aiohttp's connector
(measured in benchmarks/overhead.py; `CACHESCOUT_UPSTREAM_TRANSPORT=httpx` switches back).

Idle connections expire before the engine's own keep-alive does (`upstream_keepalive_s`, 4 s; vLLM's
`VLLM_HTTP_TIMEOUT_KEEP_ALIVE` and uvicorn's `timeout_keep_alive` are 5 s): a pooled connection reused
at the moment the engine closes it fails the request (ServerDisconnected -> 502), and a POST cannot be
retried safely, so the pool must not offer a connection the engine may be closing.

Both transports are configured to add nothing of their own to the forwarded request (no default
User-Agent / Accept / Accept-Encoding / Content-Type, no cookies, no env proxies, no decompression),
so the engine sees the client's headers.

The forwarder sends through the client's transport (`handle_async_request`, httpx's public transport
API) rather than `client.send`: the client layer adds auth, redirect, event-hook and cookie-jar
handling that a proxy must not apply, and its cookie extraction alone cost ~10% of the proxy's CPU.
Other users of the client (readiness probe, live policy) use the client normally.
"""

from __future__ import annotations

from http.cookiejar import CookieJar, DefaultCookiePolicy

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


def _aiohttp_transport(settings: Settings) -> httpx.AsyncBaseTransport:
    """httpx-aiohttp transport with a session that adds no headers; call inside the event loop."""
    import aiohttp
    from httpx_aiohttp import AiohttpTransport

    connector = aiohttp.TCPConnector(
        limit=settings.max_connections,
        limit_per_host=0,
        keepalive_timeout=settings.upstream_keepalive_s,
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
    return AiohttpTransport(client=session, limits=client_limits(settings), trust_env=False)


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
