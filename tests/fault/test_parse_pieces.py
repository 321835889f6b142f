"""Large bodies are parsed on the worker thread in short pieces, with the collector paused (issue 39).

The worker thread holds the GIL for the whole of any C call; the event loop (`/livez`, every other
request) waits it out. Before: one `json.loads` per body (14 ms for a 4 MiB chat body, 55-68 ms for
a 3 MB Responses/Messages body of 40k items, measured on this box) and the full collections its
new objects triggered (~50 ms each). These tests check the mechanisms, not timings: the same parse
result as `json.loads`, no single decode call over 16 KiB of text unless it is one scalar, the
collector off during a job and back on after; and, against the real `cachescout serve`, hostile
40k-item Responses and Messages bodies are learned while every `/livez` answers 200.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time

import httpx
import pytest

from proxy.runtime import offload
from proxy.runtime.offload import gc_paused, loads_in_pieces, view_from_openai_bytes

from .conftest import GOOD, proxy
from .test_connections import _flood_body, livez

ITEMS = 40_000


def responses_body(k: int = 0) -> bytes:
    items = [
        {"type": "message", "role": "user" if i % 2 == 0 else "assistant", "content": f"item {k}.{i} " + "y" * 50}
        for i in range(ITEMS)
    ]
    return json.dumps({"model": "m", "user": f"r{k}", "max_output_tokens": 4, "input": items}).encode()


def messages_body(k: int = 0, nested: bool = False) -> bytes:
    if nested:  # one message with 40k content blocks
        msgs = [{"role": "user", "content": [{"type": "text", "text": f"b {k}.{i} " + "y" * 50} for i in range(ITEMS)]}]
    else:
        roles = ("user", "assistant")
        msgs = [{"role": roles[i % 2], "content": f"m {k}.{i} " + "y" * 50} for i in range(ITEMS)]
    return json.dumps({"model": "m", "max_tokens": 4, "system": "be brief", "messages": msgs}).encode()


SHAPES = {
    "chat_4mib": lambda: _flood_body(3, 4 << 20),
    "responses_40k": responses_body,
    "messages_40k": messages_body,
    "messages_nested_40k": lambda: messages_body(nested=True),
    "whitespace": lambda: json.dumps({"a": [1, 2.5, None, True, {"b": []}, "\u00e9"] * 3000}, indent=2).encode(),
    "small": lambda: b' { "a" : [ 1 , 2 ] , "b" : { } , "a" : 3 } ',
    "scalar": lambda: b' "x" ',
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_pieces_parse_exactly_like_json_loads_in_short_calls(shape, monkeypatch):
    body = SHAPES[shape]()
    spans: list[tuple[int, bool]] = []
    real = offload._DECODER.raw_decode

    def recorded(s: str, idx: int = 0):
        value, end = real(s, idx)
        spans.append((end - idx, isinstance(value, str | int | float | bool) or value is None))
        return value, end

    monkeypatch.setattr(offload._DECODER, "raw_decode", recorded)
    assert loads_in_pieces(body) == json.loads(body)
    # every decode call covered at most 16 KiB of text, or one scalar (a string is scanned fast)
    assert all(n <= 16 * 1024 or scalar for n, scalar in spans), max(spans)
    if len(body) > 1 << 20:
        assert len(spans) > 100  # taken apart, not one call


@pytest.mark.parametrize(
    "bad",
    [b'{"a":1,}', b'{"a" 1}', b"[1 2]", b'{"a":1} x', b"{a:1}", b"", b'{"m":[' + b'{"x":1},' * 5000 + b'{"x":1,}]}'],
)
def test_pieces_reject_what_json_loads_rejects(bad):
    with pytest.raises(ValueError):
        json.loads(bad)
    with pytest.raises(ValueError):
        loads_in_pieces(bad)


def test_deep_nesting_fails_like_json_loads():
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(RecursionError):
        loads_in_pieces(deep)
    assert view_from_openai_bytes("/v1/chat/completions", b'{"messages":' + deep + b"}", {}, 64, 4.0) is None


def test_the_collector_waits_while_a_job_runs_and_resumes_after(monkeypatch):
    seen = []
    real = offload.view_from_openai

    def spy(*a, **k):
        seen.append(gc.isenabled())
        return real(*a, **k)

    monkeypatch.setattr(offload, "view_from_openai", spy)
    assert gc.isenabled()
    view = view_from_openai_bytes("/v1/responses", responses_body(), {}, 64, 4.0)
    assert view is not None and len(view.block_hashes) > 1000
    assert seen == [False] and gc.isenabled()
    # nested pauses (never more than one job at once today) restore only at the outermost exit,
    # and a collector someone else turned off stays off
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.sockets
def test_hostile_responses_and_messages_bodies_are_learned_and_livez_answers(engine_url, tmp_path):
    """8 clients posting 40k-item Responses and Messages bodies (3-4 MB) to the default config:
    every `/livez` answer is 200 and some bodies are learned (offloaded, parsed in pieces). The
    latency figures are the probe's (`benchmarks/parse_flood.py`, docs/results/hardening.md)."""
    bodies = [
        ("/v1/responses", responses_body(k)) if k % 2 == 0 else ("/v1/messages", messages_body(k, nested=k % 4 == 1))
        for k in range(8)
    ]
    with proxy(engine_url, tmp_path) as px:

        async def flood(until: float) -> int:
            async with httpx.AsyncClient(timeout=120) as c:

                async def one(k: int) -> int:
                    n = 0
                    while time.monotonic() < until:
                        path, body = bodies[k]
                        r = await c.post(px.url + path, content=body, headers=GOOD)
                        assert r.status_code == 200
                        n += 1
                    return n

                return sum(await asyncio.gather(*(one(k) for k in range(8))))

        with livez(px.url, tmp_path) as samples:
            sent = asyncio.run(flood(time.monotonic() + 4.0))
        time.sleep(1.0)
        obs = px.state()["observer"]
        log = px.log_text()
    assert sent >= 8
    assert samples and {st for _, st in samples} == {200}
    assert obs["offloaded"] >= 1 and obs["observed"] >= 1, obs
    assert "Traceback" not in log
