"""What the live planner counts as prefilling and as decoding (runtime/live_load.py): a streamed
request prefills until its first output reaches the proxy — the role-only chunk on engines that
send it with their first output (vLLM, SGLang), else its first token — and decodes after that until
its response ends. A warm's price charges both (core/economics.queueing)."""

from __future__ import annotations

import json

import pytest

from proxy.contracts import RequestContext
from proxy.core import PolicyConfig, ScoutPolicy
from proxy.runtime.live_policy import LivePolicyObserver

ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
NAME = b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f"}}]}}]}\n\n'


@pytest.mark.parametrize("role_is_first_output", [True, False])
def test_a_stream_prefills_until_its_first_output_then_decodes(role_is_first_output):
    obs = LivePolicyObserver(ScoutPolicy(PolicyConfig()), None, lambda: 0.0, defer=False)
    obs.role_is_first_output = role_is_first_output
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hello " * 50}]}
    raw = json.dumps(body).encode()
    ctx = RequestContext(1, "POST", "/v1/chat/completions", {}, raw, body, 0.0)
    obs.on_request(ctx)
    obs.on_response_start(ctx, 200, {"content-type": "text/event-stream"}, 0.01)
    load = obs.load()
    assert (load.inflight, load.prefilling, load.decoding) == (1, 1, 0)
    obs.on_response_chunk(ctx, ROLE, 0.1)
    load = obs.load()
    assert (load.prefilling, load.decoding) == ((0, 1) if role_is_first_output else (1, 0))
    obs.on_response_chunk(ctx, NAME, 0.2)
    load = obs.load()
    assert (load.prefilling, load.decoding) == (0, 1)
    obs.on_response_end(ctx, None, 0.3)
    load = obs.load()
    assert (load.inflight, load.prefilling, load.decoding) == (0, 0, 0)
