"""A deliberately cheap OpenAI-shaped upstream for benchmarks/overhead.py (not a test double).

Raw asyncio protocol, no framework: it must cost far less CPU than the proxies being measured, so
that the measurement is about the proxy. Keep-alive HTTP/1.1. A body containing `"stream": true`
gets an SSE response (chunked, `--chunks` events `--gap-ms` apart, like token decoding); anything
else gets a fixed ~400-byte chat.completion JSON.

    python benchmarks/fast_upstream.py --port 8011
"""

from __future__ import annotations

import argparse
import asyncio
import json

COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "The answer is 42, as computed."},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": 57,
            "completion_tokens": 9,
            "total_tokens": 66,
            "prompt_tokens_details": {"cached_tokens": 48},
        },
    },
    separators=(",", ":"),
).encode()
JSON_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(COMPLETION)).encode()
    + b"\r\n\r\n"
    + COMPLETION
)
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _sse_chunk(i: int) -> bytes:
    event = (
        b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
        b'"model":"bench","choices":[{"index":0,"delta":{"content":"tok'
        + str(i).encode()
        + b' "},"finish_reason":null}]}\n\n'
    )
    return f"{len(event):x}\r\n".encode() + event + b"\r\n"


DONE = b"data: [DONE]\n\n"
DONE_CHUNK = f"{len(DONE):x}\r\n".encode() + DONE + b"\r\n0\r\n\r\n"


class Upstream(asyncio.Protocol):
    def __init__(self, chunks: int, gap_s: float) -> None:
        self.chunks = chunks
        self.gap_s = gap_s
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            length = 0
            pos = head.find(b"content-length:")
            if pos >= 0:
                length = int(head[pos + 15 : head.find(b"\r\n", pos) if head.find(b"\r\n", pos) > 0 else None])
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            if b'"stream": true' in body or b'"stream":true' in body:
                asyncio.get_running_loop().create_task(self.stream())
            else:
                self.transport.write(JSON_RESPONSE)

    async def stream(self) -> None:
        t = self.transport
        t.write(SSE_HEAD + _sse_chunk(0))
        for i in range(1, self.chunks):
            await asyncio.sleep(self.gap_s)
            if t.is_closing():
                return
            t.write(_sse_chunk(i))
        t.write(DONE_CHUNK)


async def serve(port: int, chunks: int, gap_s: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Upstream(chunks, gap_s), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(args.port, args.chunks, args.gap_ms / 1000))


if __name__ == "__main__":
    main()
