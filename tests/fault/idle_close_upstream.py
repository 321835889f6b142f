"""An engine stand-in that closes idle keep-alive connections sooner than the proxy expects.

Run as a script: `python tests/fault/idle_close_upstream.py --port N --idle-ms MS --close fin|rst
[--lazy]`. Every request gets a small 200 JSON reply (chat completions shape, keep-alive, no
`Connection: close`), `GET /health` included. After a reply the connection may stay idle for
`--idle-ms`, then the server closes it:
  fin  a plain close (FIN), after reading anything pending (unread data would turn it into a RST);
  rst  SO_LINGER 0 then close: a RST, as a load balancer that aborts idle connections sends.
Without `--lazy` a timer closes the connection at the deadline (uvicorn's `timeout_keep_alive`,
0 ms = right after each reply). A request that arrives on a connection already past its deadline
(the timer has not run yet, or `--lazy`: there is no timer, the server notices expiry only when the
next request comes, as some load balancers do) is closed unanswered: the race where the proxy sends
on a connection the engine is closing. Counts of replies and unanswered closes are served at
`GET /stats` (ask on a new connection: it is exempt from the deadline check). `GET /partial` gets
11 bytes of a status line, then a FIN.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct
import time

STATS = {"replies": 0, "closed_unanswered": 0, "connections": 0}


def _reply(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


CHAT = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
).encode()


def _abort(writer: asyncio.StreamWriter, mode: str) -> None:
    if mode == "rst":
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    try:
        body = await reader.readexactly(length) if length else b""
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return lines[0], body


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, idle_s: float, mode: str, lazy: bool):
    STATS["connections"] += 1
    loop = asyncio.get_running_loop()
    deadline: float | None = None  # None: a new connection, or a request in progress
    timer: asyncio.TimerHandle | None = None
    try:
        while True:
            request = await _read_request(reader)
            if request is None:
                break
            if timer is not None:
                timer.cancel()
                timer = None
            if deadline is not None and time.monotonic() >= deadline:
                # past the idle deadline: the engine is closing this connection; never answered
                STATS["closed_unanswered"] += 1
                _abort(writer, mode)
                return
            line, _ = request
            if line.startswith("GET /partial"):  # a few bytes of a status line, then a close
                writer.write(b"HTTP/1.1 20")
                await writer.drain()
                writer.close()
                return
            body = json.dumps(STATS).encode() if line.startswith("GET /stats") else CHAT
            writer.write(_reply(body))
            STATS["replies"] += 1
            await writer.drain()
            deadline = time.monotonic() + idle_s
            if not lazy:
                timer = loop.call_later(idle_s, _abort, writer, mode)
    except ConnectionError:
        pass
    finally:
        if timer is not None:
            timer.cancel()
        if not writer.is_closing():
            writer.close()


async def main(port: int, idle_s: float, mode: str, lazy: bool) -> None:
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, idle_s, mode, lazy), "127.0.0.1", port, backlog=1024, limit=1 << 20
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--idle-ms", type=float, default=50.0)
    ap.add_argument("--close", choices=("fin", "rst"), default="fin")
    ap.add_argument("--lazy", action="store_true")
    a = ap.parse_args()
    asyncio.run(main(a.port, a.idle_ms / 1000, a.close, a.lazy))
