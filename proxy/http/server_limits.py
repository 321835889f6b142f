"""Client-side connection limits uvicorn does not enforce by itself (httptools protocol).

What uvicorn leaves open, measured: no limit on a request's header block (httptools buffers an
unfinished header line without bound: eight unfinished 64 MB header blocks cost 587 MB RSS), no
header-read timeout (a slowloris connection, or one that never sends a byte, is never closed; the
keep-alive timer only starts after a response) and no cap on open connections (1,100 idle sockets
under a 1,024 fd limit took `/livez` down). This protocol subclass adds, with nginx/Envoy-like
defaults (`Settings.server_*`):

- request line (method + URL) at most `max_request_line_bytes` -> 414, like nginx's 8k buffers;
- header block at most `max_header_bytes` in total -> 431 (Envoy: 60 KiB), at most `max_headers`
  header fields -> 431 (Envoy: 100);
- the header block must arrive within `header_timeout_s` of the request's first byte (or of the
  connection opening) -> 408 and close (nginx client_header_timeout);
- at most `max_connections` open client connections: one more is answered 503 and closed at once
  (its fd is released immediately, so the proxy's own endpoints keep working).

Keep-alive idle time is uvicorn's own `timeout_keep_alive` (set from `server_keep_alive_s`).
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_request_line_bytes: int = 16 * 1024
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    header_timeout_s: float = 30.0
    max_connections: int = 4096

    @classmethod
    def from_settings(cls, settings: Any) -> ServerLimits:
        d = cls()
        return cls(
            int(getattr(settings, "server_max_request_line_bytes", d.max_request_line_bytes)),
            int(getattr(settings, "server_max_header_bytes", d.max_header_bytes)),
            int(getattr(settings, "server_max_headers", d.max_headers)),
            float(getattr(settings, "server_header_timeout_s", d.header_timeout_s)),
            effective_max_connections(
                int(getattr(settings, "server_max_connections", d.max_connections)),
                int(getattr(settings, "max_connections", 512)),
            ),
        )


def effective_max_connections(wanted: int, upstream_pool: int) -> int:
    """Client connections that fit the process's fd limit next to the upstream pool and a reserve
    (files, the engine scraper, the listening socket)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(16, min(wanted, soft - upstream_pool - 64))


def raise_fd_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit (what nginx's worker_rlimit_nofile does)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


_REASONS = {
    408: b"Request Timeout",
    414: b"URI Too Long",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


def limited_protocol(limits: ServerLimits) -> type:
    """An HttpToolsProtocol subclass enforcing ``limits`` (uvicorn's `http=` accepts a class)."""

    class LimitedHttpToolsProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_bytes = 0
            self._head_fields = 0
            self._in_head = True  # reading a request line + headers
            self._head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self._refuse(503, b"too many connections")
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(limits.header_timeout_s, self._head_timeout)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self._in_head and not self.transport.is_closing():
                self._refuse(408, b"request headers not received in time")

        def _refuse(self, status: int, msg: bytes) -> None:
            self._disarm()
            if self.transport.is_closing():
                return
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (status, _REASONS[status], len(msg), msg)
            )
            self.transport.close()

        def send_400_response(self, msg: str) -> None:
            if not self.transport.is_closing():  # not after our own 408/414/431/503
                super().send_400_response(msg)

        def data_received(self, data: bytes) -> None:
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            if (
                self._in_head
                and self._head_bytes > limits.max_header_bytes + limits.max_request_line_bytes
                and not self.transport.is_closing()
            ):
                self._refuse(431, b"request header block too large")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head = True
            self._head_bytes = 0
            self._head_fields = 0
            self._arm()

        def on_url(self, url: bytes) -> None:
            super().on_url(url)
            if len(self.url) > limits.max_request_line_bytes:
                self._refuse(414, b"request line too long")
                raise _Stop

        def on_header(self, name: bytes, value: bytes) -> None:
            self._head_fields += 1
            if self._head_fields > limits.max_headers:
                self._refuse(431, b"too many header fields")
                raise _Stop
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._disarm()
            super().on_headers_complete()

    return LimitedHttpToolsProtocol


class _Stop(Exception):
    """Raised inside a parser callback to abort parsing (httptools turns it into a parser error)."""
