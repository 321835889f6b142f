"""A small deterministic OpenAI-compatible engine for end-to-end tests (run as its own process).

    python -m tests.http.fake_upstream --port 8001

Replies are a pure function of the request (ids are hashes of the body, `created` is fixed), so the
same request sent directly and through the proxy must produce identical results. Special models:
- "gated":   streams the first chunk, then waits until POST /_control/release (at most 10 s);
- "endless": streams a chunk every 20 ms for up to 60 s; a client disconnect is recorded;
- "slow":    waits 1.5 s before sending response headers (for read-timeout tests);
- "dies":    streams one chunk, then the server drops the connection mid-stream.
/_control/state reports chunks sent and disconnects seen, so a test can observe the upstream side.
/echo (any method) returns what arrived: method, path, query, headers, body (base64).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

CREATED = 1_700_000_000


class State:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.gated_last_sent = False
        self.gated_first_sent = False
        self.endless_chunks = 0
        self.disconnects = 0
        self.requests = 0


def _rid(prefix: str, body: bytes) -> str:
    return f"{prefix}-{hashlib.sha256(body).hexdigest()[:16]}"


def _reply_words(payload: dict) -> list[str]:
    if "messages" in payload:
        last = payload["messages"][-1].get("content", "") if payload["messages"] else ""
        text = last if isinstance(last, str) else json.dumps(last)
    else:
        text = str(payload.get("prompt", ""))
    return ["echo:"] + text.split()[:32]


def _usage(payload: dict, n_out: int) -> dict:
    prompt = len(json.dumps(payload.get("messages", payload.get("prompt", ""))).split())
    return {
        "prompt_tokens": prompt,
        "completion_tokens": n_out,
        "total_tokens": prompt + n_out,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def _sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def build_app() -> Starlette:
    state = State()

    async def chat(request: Request) -> Response:
        raw = await request.body()
        state.requests += 1
        payload = json.loads(raw)
        model = payload.get("model", "fake")
        words = _reply_words(payload)
        rid = _rid("chatcmpl", raw)
        if model == "slow":
            await asyncio.sleep(1.5)
        if not payload.get("stream"):
            return JSONResponse(
                {
                    "id": rid,
                    "object": "chat.completion",
                    "created": CREATED,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": " ".join(words)},
                            "finish_reason": "stop",
                            "logprobs": None,
                        }
                    ],
                    "usage": _usage(payload, len(words)),
                }
            )

        def chunk(delta: dict, finish: str | None = None) -> bytes:
            return _sse(
                {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": CREATED,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
                }
            )

        include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))

        async def gen():
            try:
                yield chunk({"role": "assistant", "content": ""})
                if model == "dies":
                    raise RuntimeError("engine crashed mid-stream (on purpose)")
                if model == "gated":
                    state.gated_first_sent = True
                    try:
                        await asyncio.wait_for(state.release.wait(), 10.0)
                    except TimeoutError:
                        pass
                if model == "endless":
                    for i in range(3000):
                        state.endless_chunks += 1
                        yield chunk({"content": f"t{i} "})
                        await asyncio.sleep(0.02)
                for i, word in enumerate(words):
                    yield chunk({"content": (" " if i else "") + word})
                yield chunk({}, "stop")
                if include_usage:
                    yield _sse(
                        {
                            "id": rid,
                            "object": "chat.completion.chunk",
                            "created": CREATED,
                            "model": model,
                            "choices": [],
                            "usage": _usage(payload, len(words)),
                        }
                    )
                if model == "gated":
                    state.gated_last_sent = True
                yield b"data: [DONE]\n\n"
            except (asyncio.CancelledError, GeneratorExit):
                state.disconnects += 1
                raise

        return StreamingResponse(gen(), media_type="text/event-stream")

    async def completions(request: Request) -> Response:
        raw = await request.body()
        state.requests += 1
        payload = json.loads(raw)
        model = payload.get("model", "fake")
        words = _reply_words(payload)
        rid = _rid("cmpl", raw)
        if not payload.get("stream"):
            return JSONResponse(
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": CREATED,
                    "model": model,
                    "choices": [{"index": 0, "text": " ".join(words), "finish_reason": "stop", "logprobs": None}],
                    "usage": _usage(payload, len(words)),
                }
            )

        async def gen():
            for i, word in enumerate(words):
                yield _sse(
                    {
                        "id": rid,
                        "object": "text_completion",
                        "created": CREATED,
                        "model": model,
                        "choices": [
                            {"index": 0, "text": (" " if i else "") + word, "finish_reason": None, "logprobs": None}
                        ],
                    }
                )
            yield _sse(
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": CREATED,
                    "model": model,
                    "choices": [{"index": 0, "text": "", "finish_reason": "stop", "logprobs": None}],
                }
            )
            yield b"data: [DONE]\n\n"

        return StreamingResponse(gen(), media_type="text/event-stream")

    async def models(request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": "fake", "object": "model", "created": CREATED, "owned_by": "cachescout-tests"}],
            }
        )

    async def echo(request: Request) -> Response:
        raw = await request.body()
        return JSONResponse(
            {
                "method": request.method,
                "path": request.url.path,
                "query": request.url.query,
                "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in request.headers.raw],
                "body_b64": base64.b64encode(raw).decode(),
            },
            headers={"x-upstream": "fake", "set-cookie": "a=b"},
        )

    async def health(request: Request) -> Response:
        return Response(b"", status_code=200)

    async def control_state(request: Request) -> Response:
        return JSONResponse(
            {
                "gated_first_sent": state.gated_first_sent,
                "gated_last_sent": state.gated_last_sent,
                "endless_chunks": state.endless_chunks,
                "disconnects": state.disconnects,
                "requests": state.requests,
            }
        )

    async def control_release(request: Request) -> Response:
        state.release.set()
        return JSONResponse({"released": True})

    async def status(request: Request) -> Response:
        code = int(request.path_params["code"])
        return Response(
            json.dumps({"error": {"message": f"status {code}", "type": "test", "code": code}}).encode(),
            status_code=code,
            media_type="application/json",
        )

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/echo", echo, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
            Route("/health", health, methods=["GET"]),
            Route("/status/{code:int}", status, methods=["GET", "POST"]),
            Route("/_control/state", control_state, methods=["GET"]),
            Route("/_control/release", control_release, methods=["POST"]),
        ]
    )


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(build_app(), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
