"""The byte-exact forwarder: a raw ASGI app that relays one client request to the engine.

Why raw ASGI and not a FastAPI endpoint: the forwarder is on every request, and the proxy's budget is
~1 ms of CPU per request. FastAPI's request parsing, dependency resolution and StreamingResponse
(which spawns a task group per response) cost more than the forwarding itself. Here a request is:
read the body (bounded), send it upstream untouched, relay status + headers, then relay the raw
response bytes chunk by chunk as they arrive (no buffering, no re-encoding: `aiter_raw`).

Guarantees (tested in tests/http):
- the body goes upstream exactly as received; response status/body/headers come back unchanged
  except hop-by-hop headers; the client's auth headers are forwarded untouched;
- one retry only, and only when the engine provably never answered: a reused keep-alive connection
  closed or reset before any response byte (an engine/LB idle timeout shorter than ours), on an
  inference route or an idempotent method, resent once on a new connection (`RETRY_POST_PATHS`,
  docs/hardening.md "Engine idle timeouts"); any other upstream failure before the response started
  becomes an OpenAI-style 502 (unreachable) / 504 (timeout); after it started, the client
  connection is cut (a truncated stream must not look complete);
- a client disconnect cancels the upstream request promptly (a watcher task waits on `receive()`,
  because uvicorn's `send()` silently drops writes to a closed connection);
- observer hooks run synchronously in try/except: a failing policy is counted in
  `cachescout_policy_errors_total` and never changes what the client gets.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
from starlette.types import Scope

from proxy.contracts import BodyRewriter, HeaderAdder, RequestContext, RequestObserver
from proxy.http.errors import UPSTREAM_FAILURES, classify_upstream_error, describe_upstream_error, send_error
from proxy.http.headers import REQUEST_DROP, RESPONSE_DROP, content_length, filter_headers
from proxy.http.observer import NullObserver
from proxy.http.upstream import UPSTREAM_ATTEMPT, UpstreamAttempt
from proxy.observability.metrics import ProxyMetrics, route_label

log = logging.getLogger("cachescout.forwarder")

CLIENT_GONE = 499  # nginx's convention, recorded in metrics only (the client is not there to see it)


# POST routes whose request only asks the engine to compute (generation, embedding, tokenising,
# scoring): resending one the engine never answered cannot change anything but its cache. Other
# POSTs (LoRA loading, cache resets, profiling, sleep/wake) change engine state and are not resent.
RETRY_POST_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/embeddings",
        "/v1/score",
        "/v1/rerank",
        "/rerank",
        "/score",
        "/pooling",
        "/classify",
        "/tokenize",
        "/detokenize",
        "/generate",
    }
)
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})  # RFC 9110 9.2.2


class BodyTooLarge(Exception):
    """The request body exceeded `max_body_bytes`."""


class ClientGone(Exception):
    """The client disconnected before its request body was complete."""


class Forwarder:
    """ASGI app forwarding every request it receives to `upstream_url` + path + query."""

    def __init__(
        self, upstream_url: str, max_body_bytes: int, metrics: ProxyMetrics, clock: Callable[[], float]
    ) -> None:
        self.base = upstream_url.rstrip("/")
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics
        self.clock = clock
        self.transport: httpx.AsyncBaseTransport | None = None  # the client's transport, set by the lifespan
        # A new connection per request, for the one resend after the engine dropped a reused
        # connection without answering; None: no resends (the httpx transport, or turned off).
        self.retry_transport: httpx.AsyncBaseTransport | None = None
        # A hand-built httpx.Request does not inherit the client's timeouts: pass them explicitly.
        self.timeout_ext: dict = httpx.Timeout(5.0, read=600.0).as_dict()
        self._observer: RequestObserver = NullObserver()  # replaced by the lifespan when a policy runs
        self._rewriter: BodyRewriter | None = None  # the observer, when it also rewrites bodies
        self._header_adder: HeaderAdder | None = None  # the observer, when it also adds headers
        self._ids = itertools.count(1)
        self._logged_observer_error = False
        # Bodies larger than this are not parsed here, on the event loop: the observer decides
        # whether to parse them on its worker thread or skip them (see runtime/offload.py).
        self.inline_parse_bytes = 256 * 1024
        # Bodies larger than this are relayed upstream as the chunks they arrived in (no join into
        # one bytes object, no single multi-megabyte socket write that copies it on the loop); the
        # observer gets their size only (the policy does not read bodies that large anyway).
        self.stream_body_bytes = 4 * 1024 * 1024
        # Parsed upstream URLs by (raw path, query): agents hit a handful of paths, and parsing a URL
        # is a measurable share of the per-request CPU. Bounded so random paths cannot grow it.
        self._urls: dict[tuple[bytes, bytes], httpx.URL] = {}

    # --- observer plumbing -----------------------------------------------------------------
    @property
    def observer(self) -> RequestObserver:
        return self._observer

    @observer.setter
    def observer(self, observer: RequestObserver) -> None:
        """Set once by the lifespan; whether it rewrites bodies is checked here, not per request
        (a runtime Protocol check costs microseconds)."""
        self._observer = observer
        self._rewriter = observer if isinstance(observer, BodyRewriter) else None
        self._header_adder = observer if isinstance(observer, HeaderAdder) else None

    def _observer_failed(self, hook: str) -> None:
        self.metrics.policy_errors_total.inc()
        if not self._logged_observer_error:  # once at error level; a broken policy must not flood logs
            self._logged_observer_error = True
            # always called from the forwarder's except blocks, so the traceback is the hook's
            log.exception("observer %s failed (counted in cachescout_policy_errors_total; client unaffected)", hook)  # noqa: LOG004
        else:
            log.debug("observer %s failed", hook, exc_info=True)  # noqa: LOG014

    def _make_context(self, scope: Scope, body: Any, started: float) -> RequestContext:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        parsed: Any | None = None
        if isinstance(body, _ChunkedBody):  # too large to read: the observer sees its size only
            return RequestContext(
                next(self._ids), scope["method"], scope["path"], headers, b"", None, started, body_size=body.size
            )
        if body and len(body) <= self.inline_parse_bytes and body[:1] in (b"{", b"[", b" ", b"\n", b"\t", b"\r"):
            try:
                parsed = json.loads(body)
            except (ValueError, RecursionError):  # not JSON: forwarded untouched, the engine decides
                parsed = None
        return RequestContext(next(self._ids), scope["method"], scope["path"], headers, body, parsed, started)

    # --- ASGI entry ----------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        started = self.clock()
        route = route_label(scope["path"])
        metrics = self.metrics
        metrics.inflight_requests.inc()
        status = CLIENT_GONE
        try:
            status = await self._forward(scope, receive, send, started, route)
        finally:
            metrics.inflight_requests.dec()
            metrics.observe_request(route, status, self.clock() - started)

    async def _read_body(self, scope: Scope, receive: Callable) -> bytes | _ChunkedBody:
        limit = self.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    if int(value) > limit:
                        raise BodyTooLarge
                except ValueError:
                    pass  # the server already rejects malformed lengths; be lenient here
                break
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        if size > self.stream_body_bytes and len(chunks) > 1:
            return _ChunkedBody(chunks, size)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _forward(self, scope: Scope, receive: Callable, send: Callable, started: float, route: str) -> int:
        try:
            body: bytes | bytearray | _ChunkedBody = await self._read_body(scope, receive)
        except BodyTooLarge:
            await send_error(
                send,
                413,
                f"request body exceeds {self.max_body_bytes} bytes",
                "invalid_request_error",
                "request_too_large",
            )
            return 413
        except ClientGone:
            return CLIENT_GONE

        observer = self.observer
        ctx: RequestContext | None = None
        if not isinstance(observer, NullObserver):
            try:
                ctx = self._make_context(scope, body, started)
                observer.on_request(ctx)
            except Exception:  # noqa: BLE001 - the policy never affects the client
                self._observer_failed("on_request")
            body = self._maybe_rewrite(ctx, body)
            extra = self._added_headers(ctx)
        else:
            extra = None

        # Watch for the client going away while we wait on the engine or stream its answer.
        task = asyncio.current_task()
        flags = {"done": False, "gone": False}
        watcher = asyncio.ensure_future(_watch_disconnect(receive, task, flags))
        try:
            return await self._relay(scope, send, body, ctx, route, started, flags, extra)
        except asyncio.CancelledError:
            if flags["gone"] and task is not None and task.uncancel() == 0:
                self._end(ctx, "client_disconnect", flags)
                return CLIENT_GONE
            self._end(ctx, "cancelled", flags)  # e.g. shutdown grace exceeded: keep the observer's books right
            raise
        finally:
            flags["done"] = True
            if not watcher.done():
                watcher.cancel()

    async def _relay(
        self,
        scope: Scope,
        send: Callable,
        body: bytes | bytearray | _ChunkedBody,
        ctx: RequestContext | None,
        route: str,
        started: float,
        flags: dict,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> int:
        transport = self.transport
        assert transport is not None, "forwarder used outside the app lifespan"
        headers = filter_headers(scope["headers"], REQUEST_DROP)
        if extra:
            headers.extend(extra)
        if isinstance(body, _ChunkedBody):
            # an explicit Content-Length keeps httpx (and aiohttp below it) from switching to chunked
            headers.append((b"content-length", str(body.size).encode()))
        attempt = UpstreamAttempt() if self.retry_transport is not None else None
        token = UPSTREAM_ATTEMPT.set(attempt) if attempt is not None else None
        response: httpx.Response | None = None
        failure: Exception | None = None
        try:
            response = await transport.handle_async_request(self._request(scope, headers, body))
        except Exception as exc:  # noqa: BLE001 - every failure of our hop maps to 502/504
            failure = exc
        finally:
            if token is not None:
                UPSTREAM_ATTEMPT.reset(token)
        if failure is not None:
            reason = attempt.retry_reason(failure) if attempt is not None else None
            if reason is not None and self._may_resend(scope):
                response, failure = await self._resend(scope, headers, body, reason)
            if response is None:
                assert failure is not None
                return await self._upstream_failed(scope, send, ctx, flags, failure)
        assert response is not None
        return await self._relay_response(scope, send, response, ctx, route, started, flags)

    def _request(self, scope: Scope, headers: list, body: bytes | bytearray | _ChunkedBody) -> httpx.Request:
        content: Any = body.stream() if isinstance(body, _ChunkedBody) else body  # a bytearray too, uncopied
        return httpx.Request(
            scope["method"],
            self._url(scope),
            headers=headers,
            content=content,
            extensions={"timeout": self.timeout_ext},
        )

    def _may_resend(self, scope: Scope) -> bool:
        method = scope["method"]
        return method in IDEMPOTENT_METHODS or (method == "POST" and scope["path"] in RETRY_POST_PATHS)

    async def _resend(
        self, scope: Scope, headers: list, body: bytes | bytearray | _ChunkedBody, reason: str
    ) -> tuple[httpx.Response | None, Exception | None]:
        """The one resend, on a new connection (the retry transport never reuses one, so this
        attempt is never resent again). Logged at info: the client loses nothing."""
        retry = self.retry_transport
        assert retry is not None
        log.info(
            "engine %s a reused connection before answering %s %s; resent once on a new connection",
            reason,
            scope["method"],
            scope["path"],
        )
        try:
            response = await retry.handle_async_request(self._request(scope, headers, body))
        except Exception as exc:  # noqa: BLE001 - reported like any first failure
            self.metrics.upstream_retry(reason, answered=False)
            return None, exc
        self.metrics.upstream_retry(reason, answered=True)
        return response, None

    async def _upstream_failed(
        self, scope: Scope, send: Callable, ctx: RequestContext | None, flags: dict, exc: BaseException
    ) -> int:
        """The client's 502/504 for a failure before the response started."""
        kind = classify_upstream_error(exc)
        self.metrics.upstream_error(kind)
        status, type_, code = UPSTREAM_FAILURES[kind]
        detail = describe_upstream_error(exc)
        log.warning("upstream %s error for %s %s: %s", kind, scope["method"], scope["path"], detail)
        self._end(ctx, f"upstream_{kind}", flags)
        await send_error(send, status, f"upstream {kind} error: {detail}", type_, code)
        return status

    async def _relay_response(
        self,
        scope: Scope,
        send: Callable,
        response: httpx.Response,
        ctx: RequestContext | None,
        route: str,
        started: float,
        flags: dict,
    ) -> int:
        try:
            now = self.clock()
            self.metrics.observe_first_byte(route, now - started)
            status = response.status_code
            out_headers = filter_headers(response.headers.raw, RESPONSE_DROP)
            observer = self.observer if ctx is not None else None
            if observer is not None and ctx is not None:  # (observer is set only with a context)
                try:
                    observer.on_response_start(
                        ctx, status, {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in out_headers}, now
                    )
                except Exception:  # noqa: BLE001
                    self._observer_failed("on_response_start")
            await send({"type": "http.response.start", "status": status, "headers": out_headers})
            # With a Content-Length we know which chunk is the last one and can finish the response
            # with it (one server write fewer per request); without one, an empty final message ends it.
            remaining = content_length(out_headers) if scope["method"] != "HEAD" else None
            finished = False
            try:
                async for chunk in _raw_chunks(response):
                    if observer is not None and ctx is not None:
                        try:
                            observer.on_response_chunk(ctx, chunk, self.clock())
                        except Exception:  # noqa: BLE001
                            self._observer_failed("on_response_chunk")
                    if remaining is not None:
                        remaining -= len(chunk)
                        if remaining <= 0:
                            flags["done"] = True
                            finished = True
                    await send({"type": "http.response.body", "body": chunk, "more_body": not finished})
            except Exception as exc:  # noqa: BLE001 - upstream broke mid-response (any transport's error type)
                kind = classify_upstream_error(exc)
                self.metrics.upstream_error(kind)
                log.warning(
                    "upstream %s error mid-response for %s %s: %s; cutting the client connection",
                    kind,
                    scope["method"],
                    scope["path"],
                    describe_upstream_error(exc),
                )
                self._end(ctx, f"upstream_{kind}", flags)
                return status  # returning without the final body message makes the server close the socket
            if not finished:
                flags["done"] = True  # the final send wakes the watcher; it must not cancel us now
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            self._end(ctx, None, flags)
            return status
        finally:
            await response.aclose()

    def _maybe_rewrite(
        self, ctx: RequestContext | None, body: bytes | bytearray | _ChunkedBody
    ) -> bytes | bytearray | _ChunkedBody:
        """Opt-in exception to byte-exactness: an observer that is a `BodyRewriter` may replace the
        forwarded body (e.g. engine cache hints the operator enabled). None, no such hook, or any
        failure forwards the original bytes."""
        rewriter = self._rewriter
        if rewriter is None or ctx is None:
            return body
        try:
            new = rewriter.rewrite_body(ctx)
        except Exception:  # noqa: BLE001
            self._observer_failed("rewrite_body")
            return body
        return new if isinstance(new, bytes | bytearray) else body

    def _added_headers(self, ctx: RequestContext | None) -> list[tuple[bytes, bytes]] | None:
        """Opt-in headers from an observer that is a `HeaderAdder` (the proxy's session id, a lane's
        priority header), encoded; a name the client sent is never replaced, and any failure (or a
        name or value that is not a plain latin-1 token) forwards the client's headers unchanged."""
        adder = self._header_adder
        if adder is None or ctx is None:
            return None
        try:
            pairs = adder.forward_headers(ctx)
            if not pairs:
                return None
            out = []
            for name, value in pairs:
                lname = name.lower()
                if lname in ctx.headers or "\r" in value or "\n" in value or lname.encode() in REQUEST_DROP:
                    continue
                out.append((lname.encode("latin-1"), value.encode("latin-1")))
            return out or None
        except Exception:  # noqa: BLE001
            self._observer_failed("forward_headers")
            return None

    def _url(self, scope: Scope) -> httpx.URL:
        query = scope.get("query_string") or b""
        raw_path = scope.get("raw_path") or scope["path"].encode()
        key = (raw_path, query)
        url = self._urls.get(key)
        if url is None:
            url = httpx.URL(self.base + raw_path.decode("latin-1") + ("?" + query.decode("latin-1") if query else ""))
            if len(self._urls) >= 1024:
                self._urls.clear()
            self._urls[key] = url
        return url

    def _end(self, ctx: RequestContext | None, error: str | None, flags: dict) -> None:
        """on_response_end, exactly once per request."""
        if ctx is None or flags.get("ended"):
            return
        flags["ended"] = True
        try:
            self.observer.on_response_end(ctx, error, self.clock())
        except Exception:  # noqa: BLE001
            self._observer_failed("on_response_end")


class _ChunkedBody:
    """A large request body kept as the chunks it arrived in."""

    __slots__ = ("chunks", "size")

    def __init__(self, chunks: list[bytes], size: int) -> None:
        self.chunks = chunks
        self.size = size

    async def stream(self):
        for chunk in self.chunks:
            yield chunk


async def _raw_chunks(response: httpx.Response):
    """The response's bytes as they arrive, undecoded. A response built in memory (mock transports)
    was already read by httpx and cannot be streamed again: send what it holds."""
    if response.is_stream_consumed:
        if response.content:
            yield response.content
        return
    async for chunk in response.aiter_raw():
        yield chunk


async def _watch_disconnect(receive: Callable, task: asyncio.Task | None, flags: dict) -> None:
    """Cancel `task` when the client disconnects, unless the response already completed."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
    if not flags["done"] and task is not None:
        flags["gone"] = True
        task.cancel()
