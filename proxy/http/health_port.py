"""`/livez` on a port of its own, answered by a small child process that a busy proxy cannot delay.

Why (issue 22): `/livez` on the proxy's port waits behind everything else the event loop does. On
a 2-core box, 8 clients forwarding 1-4 MiB bodies alone put its p99 at 66-163 ms (parsing them for
the policy: 73-234 ms), so a Kubernetes liveness probe with a tight timeout could restart a proxy
that was merely busy. A thread in the proxy with its own socket did not fix it: it waits for the
GIL at every wake-up, p99 32-66 ms under the same flood. A process of its own (stdlib only, ~10 MB
RSS, no asyncio) answers in p50 ~1 ms, p99 ~20 ms on the same loaded box (the scheduler's noise).

It still tells a wedged proxy from a busy one: the proxy's event loop writes a heartbeat byte into
a pipe every `HEARTBEAT_S`; when the last one is older than `health_stall_s`, `/livez` answers 503
(restart me). The pipe's end also stops the child when the proxy exits, however it exits. The
proxy binds the port (so a port in use fails at start, in the proxy) and hands the socket over.
Everything else on this port is 404; `/readyz` (which asks the engine) stays on the proxy's port.
Connections are closed after one answer; at most `MAX_CONNS` are open (the oldest goes first) and
one that has not sent its request head within `READ_TIMEOUT_S` is closed, so idle sockets cannot
hold the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import selectors
import socket
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger("cachescout.health")

HEARTBEAT_S = 0.5
READ_TIMEOUT_S = 5.0
MAX_CONNS = 64
MAX_HEAD = 8192


def _reply(status: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    ).encode() + body


OK = _reply("200 OK", b'{"status":"ok"}')
STALLED = _reply("503 Service Unavailable", b'{"status":"event loop stalled"}')
NOT_FOUND = _reply("404 Not Found", b'{"detail":"Not Found"}')


class HealthPort:
    """The proxy's side: binds ``host:port``, starts the child, beats the heartbeat from the loop."""

    def __init__(self, host: str, port: int, stall_s: float) -> None:
        self.sock = socket.create_server((host, port), backlog=128)
        self.port = self.sock.getsockname()[1]
        self.stall_s = stall_s
        self._beat_r, self._beat_w = os.pipe()
        os.set_blocking(self._beat_w, False)
        self.proc: subprocess.Popen[bytes] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        root = str(Path(__file__).resolve().parents[2])
        code = f"import sys; sys.path.insert(0, {root!r}); from proxy.http.health_port import main; main()"
        fds = (self.sock.fileno(), self._beat_r)
        args = [str(self.sock.fileno()), str(self._beat_r), repr(self.stall_s)]
        self.proc = subprocess.Popen([sys.executable, "-c", code, *args], pass_fds=fds, stdin=subprocess.DEVNULL)
        os.close(self._beat_r)  # the child holds it now
        self.sock.close()
        self._beat(loop)

    def _beat(self, loop: asyncio.AbstractEventLoop) -> None:
        with contextlib.suppress(BlockingIOError, BrokenPipeError, OSError):
            os.write(self._beat_w, b".")
        self._timer = loop.call_later(HEARTBEAT_S, self._beat, loop)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with contextlib.suppress(OSError):
            os.close(self._beat_w)  # the child sees the pipe's end and exits
        if self.proc is not None:
            try:
                self.proc.wait(2.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(2.0)


def answer(head: bytes, beat_at: float, stall_s: float, now: float) -> bytes:
    line = head.split(b"\r\n", 1)[0].split(b" ")
    if len(line) >= 2 and line[0] in (b"GET", b"HEAD") and line[1].split(b"?", 1)[0] == b"/livez":
        return OK if now - beat_at < stall_s else STALLED
    return NOT_FOUND


def serve(listen: socket.socket, beat_fd: int, stall_s: float) -> None:
    """The child's loop: answer `/livez` until the heartbeat pipe ends."""
    listen.setblocking(False)
    os.set_blocking(beat_fd, False)
    sel = selectors.DefaultSelector()
    sel.register(listen, selectors.EVENT_READ, "listen")
    sel.register(beat_fd, selectors.EVENT_READ, "beat")
    conns: dict[socket.socket, tuple[float, bytearray]] = {}  # insertion order: oldest first
    beat_at = time.monotonic()

    def close(c: socket.socket) -> None:
        conns.pop(c, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            sel.unregister(c)
        with contextlib.suppress(OSError):
            c.close()

    while True:
        for key, _ in sel.select(0.5):
            if key.data == "beat":
                try:
                    if not os.read(beat_fd, 4096):
                        return  # the proxy is gone
                    beat_at = time.monotonic()
                except BlockingIOError:
                    pass
                continue
            if key.data == "listen":
                with contextlib.suppress(BlockingIOError, InterruptedError, OSError):
                    new, _addr = listen.accept()
                    if len(conns) >= MAX_CONNS:
                        close(next(iter(conns)))
                    new.setblocking(False)
                    conns[new] = (time.monotonic(), bytearray())
                    sel.register(new, selectors.EVENT_READ, "conn")
                continue
            c = key.fileobj
            if not isinstance(c, socket.socket):
                continue
            try:
                data = c.recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                close(c)
                continue
            buf = conns[c][1]
            buf += data
            if not data or len(buf) > MAX_HEAD:
                close(c)
            elif b"\r\n\r\n" in buf:
                with contextlib.suppress(OSError):
                    c.send(answer(bytes(buf), beat_at, stall_s, time.monotonic()))  # < 200 B: fits the buffer
                close(c)
        now = time.monotonic()
        for old in [old for old, (t, _) in conns.items() if now - t > READ_TIMEOUT_S]:
            close(old)


def main() -> None:
    listen_fd, beat_fd, stall_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    with contextlib.suppress(KeyboardInterrupt):
        serve(socket.socket(fileno=listen_fd), beat_fd, stall_s)
