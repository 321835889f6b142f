"""ResponseTap reads usage, finish_reason, first-token time and tool calls from the side."""

import json

from proxy.runtime.response_tap import ResponseTap


def sse(*objs):
    return b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs) + b"data: [DONE]\n\n"


def test_sse_tool_call_reassembled_across_split_chunks():
    body = sse(
        {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                              "function": {"name": "search", "arguments": "{\"q\""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 7,
                                  "prompt_tokens_details": {"cached_tokens": 64}}},
    )
    tap = ResponseTap(stream=True)
    for i in range(0, len(body), 7):              # frames split at arbitrary byte boundaries
        tap.feed(body[i:i + 7], now=float(i))
    tap.finish()
    assert tap.finish_reason == "tool_calls"
    assert (tap.prompt_tokens, tap.cached_tokens, tap.output_tokens) == (100, 64, 7)
    assert tap.first_token_at is not None and tap.first_token_at > 0
    msg = tap.assistant_message()
    assert msg["tool_calls"][0]["id"] == "call_1"
    assert msg["tool_calls"][0]["function"] == {"name": "search", "arguments": "{\"q\": 1}"}


def test_json_body_and_crlf_frames():
    tap = ResponseTap(stream=False)
    body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 1, "cached_tokens": 5}}).encode()
    tap.feed(body[:5], 1.0)
    tap.feed(body[5:], 2.0)
    tap.finish()
    assert tap.finish_reason == "stop" and tap.prompt_tokens == 10 and tap.cached_tokens == 5
    assert tap.assistant_message() == {"role": "assistant", "content": "hi"}

    tap = ResponseTap(stream=True)
    tap.feed(b'data: {"choices":[{"delta":{"content":"a"}}]}\r\n\r\ndata: {"choices":[{"delta":{},'
             b'"finish_reason":"length"}]}\r\n\r\n', 3.0)
    tap.finish()
    assert tap.finish_reason == "length" and tap.first_token_at == 3.0


def test_garbage_is_ignored():
    tap = ResponseTap(stream=True)
    tap.feed(b"data: not json\n\n: comment\n\nevent: x\n\n", 1.0)
    tap.finish()
    assert tap.finish_reason is None and tap.prompt_tokens is None and tap.assistant_message() is None
