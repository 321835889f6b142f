"""A client that stops reading at `data: [DONE]` and closes the connection (as a plain httpx or
requests loop does) can hang up before the proxy has read the engine's end of the chunked stream.
The response was complete for the client; the proxy must still learn from it (finish reason, usage,
the tool calls that pause the session), not treat it as a failed request. Before the fix the
session's `tool_calls` pause was lost whenever that race was lost, intermittently, and no
tool_resume warm was ever planned for it (the real-vLLM e2e check 4 failed that way in CI)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

from proxy.harness.proxy_server import run_proxy_server
from proxy.harness.uvicorn_thread import serve_in_thread

from .conftest import MODEL, proxy_settings

pytestmark = pytest.mark.sockets
SESSION = "race-1"


def _event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _chat(request):
    await request.body()

    async def events():
        base = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": MODEL}
        call = {"index": 0, "id": "call-1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
        yield _event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]})
        yield _event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
        usage = {"prompt_tokens": 300, "completion_tokens": 8, "total_tokens": 308}
        yield _event({**base, "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"
        await asyncio.sleep(0.5)  # the engine's end of stream comes after the client has hung up

    return StreamingResponse(events(), media_type="text/event-stream")


def test_a_client_that_hangs_up_after_done_still_pauses_its_session():
    engine = Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"])])
    with serve_in_thread(engine, name="engine") as up:
        settings = proxy_settings(f"http://127.0.0.1:{up.port}", engine="none")
        with run_proxy_server(settings) as px:
            body = {
                "model": MODEL,
                "messages": [
                    {"role": "system", "content": "You are a search agent. " * 40},
                    {"role": "user", "content": "go"},
                ],
                "stream": True,
                "tools": [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}],
            }
            with httpx.Client(timeout=10) as http:
                with http.stream(
                    "POST", px.url + "/v1/chat/completions", json=body, headers={"x-session-id": SESSION}
                ) as r:
                    assert r.status_code == 200
                    for line in r.iter_lines():
                        if line.strip() == "data: [DONE]":
                            break  # ... and leave: the connection closes with the stream unread
            deadline = time.monotonic() + 5
            finishes: list = []
            while time.monotonic() < deadline:
                finishes = px.call(
                    lambda: [s.finish for s in px.live.policy.sessions.sessions.values() if s.last_end is not None]
                )
                if finishes:
                    break
                time.sleep(0.05)
            assert finishes == ["tool_calls"], finishes
