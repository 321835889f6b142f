"""A raw-socket engine stand-in for the fault suite: every reply is exact bytes we choose.

Run as a script (`python tests/fault/hostile_upstream.py --port N [--waiting W]`). Routes:
  POST /v1/chat/completions  401 unless `Authorization: Bearer good` (or `good-b`, a second tenant's
                             key); else by a marker in the body:
                             "nosep" -> 16 MiB text/event-stream without a line end,
                             "deep"  -> a 200k-deep JSON array body,
                             "stream": true -> a short SSE reply with usage, otherwise JSON + usage
  GET /huge-headers          200 with a 16 KiB header and 300 header fields
  GET /headers?line=N&fields=M  200 with one N-byte header line and M more header fields
  POST /echo-sha             the sha256 and length of the body received (large-body byte-exactness)
  GET /stall, /trickle       headers then silence / a body in 10-byte pieces 50 ms apart
  POST /echo                 the body back (malformed bodies pass untouched)
  GET /reset                 closes the connection without a reply
  GET /500                   a 500 with a JSON body
  GET /metrics               vLLM-style gauges; num_requests_waiting = --waiting (a queued engine)
  GET /health, /v1/models    200
"""

from __future__ import annotations

import argparse
import asyncio
import json

WAITING = 0


def _resp(status: str, body: bytes, ctype: bytes = b"application/json", extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 "
        + status.encode()
        + b"\r\ncontent-type: "
        + ctype
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n"
        + extra
        + b"\r\n"
        + body
    )


def _usage(n: int) -> dict:
    return {
        "prompt_tokens": n,
        "completion_tokens": 2,
        "total_tokens": n + 2,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


async def _chat(writer: asyncio.StreamWriter, headers: dict, body: bytes) -> None:
    if headers.get("authorization") not in ("Bearer good", "Bearer good-b"):  # two tenants' keys
        writer.write(_resp("401 Unauthorized", b'{"error":{"message":"bad key","type":"auth","code":401}}'))
        return
    if b'"nosep"' in body:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: "
            + str(16 * 1024 * 1024).encode()
            + b"\r\n\r\n"
        )
        piece = b"x" * 65536
        for _ in range(256):
            writer.write(piece)
            await writer.drain()
        return
    if b'"deep"' in body:
        depth = 200_000
        writer.write(_resp("200 OK", b"[" * depth + b"]" * depth))
        return
    n = max(1, len(body) // 4)
    if b'"stream": true' in body or b'"stream":true' in body:
        frames = [
            {"choices": [{"index": 0, "delta": {"content": "ok"}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {"choices": [], "usage": _usage(n)},
        ]
        data = b"".join(b"data: " + json.dumps(f).encode() + b"\n\n" for f in frames) + b"data: [DONE]\n\n"
        writer.write(_resp("200 OK", data, b"text/event-stream"))
        return
    reply = {
        "id": "x",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": _usage(n),
    }
    writer.write(_resp("200 OK", json.dumps(reply).encode()))


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
            path = target.split("?", 1)[0]
            if method == "POST" and path == "/v1/chat/completions":
                await _chat(writer, headers, body)
            elif path == "/echo-sha":
                import hashlib

                writer.write(
                    _resp(
                        "200 OK", json.dumps({"sha256": hashlib.sha256(body).hexdigest(), "length": len(body)}).encode()
                    )
                )
            elif path == "/stall":  # headers, then silence
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 100\r\n\r\nda")
                await writer.drain()
                await asyncio.sleep(3600)
            elif path == "/trickle":  # a body dribbled out 10 bytes every 50 ms
                data = b"data: " + b"t" * 94
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 100\r\n\r\n")
                for i in range(0, 100, 10):
                    writer.write(data[i : i + 10])
                    await writer.drain()
                    await asyncio.sleep(0.05)
            elif path == "/echo":
                writer.write(_resp("200 OK", body, headers.get("content-type", "application/octet-stream").encode()))
            elif path == "/huge-headers":
                extra = b"x-big: " + b"b" * 16384 + b"\r\n" + b"".join(b"x-h%d: %d\r\n" % (i, i) for i in range(300))
                writer.write(_resp("200 OK", b'{"ok":true}', extra=extra))
            elif path == "/headers":
                q = dict(kv.split("=", 1) for kv in target.partition("?")[2].split("&") if "=" in kv)
                line, fields = int(q.get("line", 0)), int(q.get("fields", 0))
                extra = (b"x-line: " + b"l" * line + b"\r\n" if line else b"") + b"".join(
                    b"x-f%d: %d\r\n" % (i, i) for i in range(fields)
                )
                writer.write(_resp("200 OK", b'{"ok":true}', extra=extra))
            elif path == "/reset":
                writer.transport.abort()
                return
            elif path == "/500":
                writer.write(_resp("500 Internal Server Error", b'{"error":{"message":"boom"}}'))
            elif path == "/metrics":
                text = (
                    f"vllm:num_requests_waiting {WAITING}\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.5\n"
                ).encode()
                writer.write(_resp("200 OK", text, b"text/plain"))
            else:
                writer.write(_resp("200 OK", b'{"object":"list","data":[{"id":"m","object":"model"}]}'))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port, limit=1 << 20)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--waiting", type=int, default=0)
    a = ap.parse_args()
    WAITING = a.waiting
    asyncio.run(main(a.port))
