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

- a request body must keep arriving (issue 22): no body byte for `body_timeout_s` -> 408 and close
  (nginx client_body_timeout), and at least `body_min_rate` bytes/s on average after a grace of
  `body_timeout_s` (Apache mod_reqtimeout `body=20,MinRate=500`), so trickled bodies cannot hold
  connections for long;
- at the connection cap, a new connection first *sheds* one that is doing nothing useful: the
  oldest idle one (a keep-alive connection between requests, or one that never sent a byte), else
  the oldest one still sending its headers, else the slowest one still sending its body (408);
  idle/header-phase connections younger than 1 s (just connected, about to send) go last.
  Only when every connection is busy with a request is the new one refused (503). So idle and slow
  sockets can never take `/livez` (or a real client) down.

Keep-alive idle time is uvicorn's own `timeout_keep_alive` (set from `server_keep_alive_s`).
Counts of what was shed/refused are in `proxy.observability.metrics.CONNECTION_EVENTS` (exported
as `cachescout_connections_shed_total{reason}`).
"""

from __future__ import annotations

import asyncio
import resource
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# What the limits did, process-wide: shed idle / slow_header / slow_body, body_timeout (408 while
# reading a body), header_timeout, refused (503 at the cap, all busy).
from proxy.observability.metrics import CONNECTION_EVENTS


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_request_line_bytes: int = 16 * 1024
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    header_timeout_s: float = 30.0
    max_connections: int = 4096
    body_timeout_s: float = 20.0
    body_min_rate: float = 500.0

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
            float(getattr(settings, "server_body_timeout_s", d.body_timeout_s)),
            float(getattr(settings, "server_body_min_rate", d.body_min_rate)),
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

# phases of a connection, for shedding
_IDLE, _HEAD, _BODY, _BUSY = 0, 1, 2, 3
SHED_GRACE_S = 1.0  # a connection this new in its idle/header phase is shed only after slow bodies


def limited_protocol(limits: ServerLimits) -> type:
    """An HttpToolsProtocol subclass enforcing ``limits`` (uvicorn's `http=` accepts a class)."""

    # Connections by phase, oldest first (shared by this server's connections: shed candidates).
    idle: OrderedDict[Any, None] = OrderedDict()
    heads: OrderedDict[Any, None] = OrderedDict()
    bodies: OrderedDict[Any, None] = OrderedDict()
    tables = {_IDLE: idle, _HEAD: heads, _BODY: bodies}

    class LimitedHttpToolsProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_bytes = 0
            self._head_fields = 0
            self._in_head = True  # reading a request line + headers
            self._head_timer: asyncio.TimerHandle | None = None
            self._phase = -1
            self._since = 0.0
            self._body_timer: asyncio.TimerHandle | None = None
            self._body_start = 0.0
            self._body_last = 0.0
            self._body_bytes = 0

        # --- phase bookkeeping (what can be shed) ---------------------------------------------
        def _set_phase(self, phase: int) -> None:
            old = tables.get(self._phase)
            if old is not None:
                old.pop(self, None)
            self._phase = phase
            self._since = self.loop.time()
            new = tables.get(phase)
            if new is not None:
                new[self] = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._set_phase(_IDLE)
            self._arm()
            if len(self.connections) > limits.max_connections and not self._shed_one():
                CONNECTION_EVENTS["refused"] += 1
                self._refuse(503, b"too many connections")

        def _shed_one(self) -> bool:
            """Close the least useful other connection (module docstring); False: all are busy.
            Idle and header-phase connections younger than SHED_GRACE_S (one that just connected
            and is about to send its request) go only after every slow body."""
            now = self.loop.time()
            if self._shed_oldest(now - SHED_GRACE_S):
                return True
            slowest, worst = None, float("inf")
            for victim in bodies:
                rate = victim._body_bytes / max(1e-3, now - victim._body_start)
                if rate < worst:
                    slowest, worst = victim, rate
            if slowest is not None:
                CONNECTION_EVENTS["slow_body"] += 1
                slowest._shed(408)
                return True
            return self._shed_oldest(float("inf"))

        def _shed_oldest(self, since_before: float) -> bool:
            """Shed the oldest idle (else header-phase) connection in its phase since before ``since_before``."""
            for table, reason in ((idle, "idle"), (heads, "slow_header")):
                for victim in table:  # oldest first
                    if victim is self or victim.transport.is_closing():
                        continue
                    if victim._since > since_before:
                        break  # the rest are younger still
                    CONNECTION_EVENTS[reason] += 1
                    victim._shed(408 if reason == "slow_header" else None)
                    return True
            return False

        def _shed(self, status: int | None) -> None:
            self._set_phase(_BUSY)  # no longer a candidate
            if status is None:
                self._disarm()
                self.transport.close()
            else:
                self._refuse(status, b"connection shed: the server is at its connection limit")

        def connection_lost(self, exc: Exception | None) -> None:
            self._set_phase(-1)
            self._disarm()
            self._disarm_body()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(limits.header_timeout_s, self._head_timeout)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _disarm_body(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self._in_head and not self.transport.is_closing():
                CONNECTION_EVENTS["header_timeout"] += 1
                self._refuse(408, b"request headers not received in time")

        # --- request body pace ----------------------------------------------------------------------
        def _body_deadline(self) -> float:
            grace = self._body_start + limits.body_timeout_s
            by_rate = grace + self._body_bytes / limits.body_min_rate if limits.body_min_rate > 0 else float("inf")
            return min(self._body_last + limits.body_timeout_s, by_rate)

        def _body_check(self) -> None:
            self._body_timer = None
            if self._phase != _BODY or self.transport.is_closing():
                return
            now = self.loop.time()
            deadline = self._body_deadline()
            if self.flow.read_paused:  # we stopped reading (the app is behind): not the client's fault
                self._body_last = now
                deadline = now + limits.body_timeout_s
            if now >= deadline:
                CONNECTION_EVENTS["body_timeout"] += 1
                self._set_phase(_BUSY)
                self._refuse(408, b"request body not received in time")
                return
            self._body_timer = self.loop.call_later(deadline - now + 0.01, self._body_check)

        def on_body(self, body: bytes) -> None:
            self._body_bytes += len(body)
            self._body_last = self.loop.time()
            super().on_body(body)

        def on_message_complete(self) -> None:
            if self._phase == _BODY:
                self._set_phase(_BUSY)
                self._disarm_body()
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._disarm_body()
            if not self.transport.is_closing() and self.timeout_keep_alive_task is not None:
                self._set_phase(_IDLE)  # between requests: idle until its next byte

        # --- responses we write ourselves -----------------------------------------------------------
        def _refuse(self, status: int, msg: bytes) -> None:
            self._set_phase(-1)
            self._disarm()
            self._disarm_body()
            if self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_complete and self.cycle.response_started:
                self.transport.close()  # mid-response: no status line of ours can follow
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
                if self._phase == _IDLE:
                    self._set_phase(_HEAD)
            super().data_received(data)
            if self._phase == _BODY and self._body_timer is None and not self.transport.is_closing():
                self._body_timer = self.loop.call_later(limits.body_timeout_s, self._body_check)
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
            if self._phase in (_IDLE, _BUSY):
                self._set_phase(_HEAD)
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
            if self.transport.is_closing():
                return
            # a body follows unless the parser already knows it is empty; on_message_complete ends it.
            # The pace timer is armed only if the body is still incomplete when this read is parsed
            # (data_received): most requests arrive whole, and then cost no timer.
            self._set_phase(_BODY)
            self._body_start = self._body_last = self.loop.time()
            self._body_bytes = 0
            self._disarm_body()

    return LimitedHttpToolsProtocol


class _Stop(Exception):
    """Raised inside a parser callback to abort parsing (httptools turns it into a parser error)."""
