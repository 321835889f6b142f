"""ResponseTap reads usage, finish_reason, first-token time and tool calls from the side."""

import json

from proxy.runtime.response_tap import ResponseTap


def sse(*objs):
    return b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs) + b"data: [DONE]\n\n"


def test_sse_tool_call_reassembled_across_split_chunks():
    body = sse(
        {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "search", "arguments": '{"q"'},
                            }
                        ]
                    },
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {
            "choices": [],
            "usage": {"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 64}},
        },
    )
    tap = ResponseTap(stream=True)
    for i in range(0, len(body), 7):  # frames split at arbitrary byte boundaries
        tap.feed(body[i : i + 7], now=float(i))
    tap.finish()
    assert tap.finish_reason == "tool_calls"
    assert (tap.prompt_tokens, tap.cached_tokens, tap.output_tokens) == (100, 64, 7)
    assert tap.first_token_at is not None and tap.first_token_at > 0
    msg = tap.assistant_message()
    assert msg["tool_calls"][0]["id"] == "call_1"
    assert msg["tool_calls"][0]["function"] == {"name": "search", "arguments": '{"q": 1}'}


def test_the_role_chunk_times_prefill_only_where_the_engine_sends_it_with_its_first_output():
    """vLLM and SGLang send `delta: {"role": ...}` with the engine's first output; a tool call's
    first `tool_calls` delta comes only once its name is generated, decode steps later."""
    frames = [
        sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})[: -len(b"data: [DONE]\n\n")],
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f"}}]}}]}\n\n',
    ]
    for role_first, expected in ((True, 1.0), (False, 2.0)):
        tap = ResponseTap(stream=True, role_is_first_output=role_first)
        tap.feed(frames[0], 1.0)
        tap.feed(frames[1], 2.0)
        assert tap.first_token_at == expected


def test_json_body_and_crlf_frames():
    tap = ResponseTap(stream=False)
    body = json.dumps(
        {
            "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "cached_tokens": 5},
        }
    ).encode()
    tap.feed(body[:5], 1.0)
    tap.feed(body[5:], 2.0)
    tap.finish()
    assert tap.finish_reason == "stop" and tap.prompt_tokens == 10 and tap.cached_tokens == 5
    assert tap.assistant_message() == {"role": "assistant", "content": "hi"}

    tap = ResponseTap(stream=True)
    tap.feed(
        b'data: {"choices":[{"delta":{"content":"a"}}]}\r\n\r\ndata: {"choices":[{"delta":{},'
        b'"finish_reason":"length"}]}\r\n\r\n',
        3.0,
    )
    tap.finish()
    assert tap.finish_reason == "length" and tap.first_token_at == 3.0


def test_garbage_is_ignored():
    tap = ResponseTap(stream=True)
    tap.feed(b"data: not json\n\n: comment\n\nevent: x\n\n", 1.0)
    tap.finish()
    assert tap.finish_reason is None and tap.prompt_tokens is None and tap.assistant_message() is None


def test_deep_or_broken_json_is_ignored_quietly():
    from proxy.runtime.response_tap import TapBudget

    budget = TapBudget(10 << 20)
    tap = ResponseTap(stream=False, budget=budget)
    tap.feed(b"[" * 200_000 + b"]" * 200_000, 1.0)
    tap.finish()  # RecursionError inside json.loads: swallowed
    assert tap.finish_reason is None and budget.used == 0
    tap = ResponseTap(stream=True, budget=budget)
    tap.feed(b"data: " + b"[" * 200_000 + b"\n\n", 1.0)
    tap.finish()
    assert tap.frames == 0 and budget.used == 0


def test_all_taps_share_one_byte_budget():
    from proxy.runtime.response_tap import TapBudget

    budget = TapBudget(300_000)
    taps = [ResponseTap(stream=False, budget=budget) for _ in range(5)]
    for t in taps:
        t.feed(b"{" + b" " * 100_000, 1.0)  # 5 x 100 KB buffered JSON bodies
    assert budget.used <= 300_000 and budget.overflows >= 2
    sse_tap = ResponseTap(stream=True, budget=budget)
    sse_tap.feed(b"data: " + b"x" * 500_000, 1.0)  # no line end: the pending line is not kept
    assert budget.used <= 300_000
    for t in [*taps, sse_tap]:
        t.finish()
    assert budget.used == 0


def test_a_stream_is_complete_at_done_or_a_finish_reason():
    tap = ResponseTap(stream=True)
    tap.feed(b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n', 0.0)
    assert not tap.complete  # mid-stream: a hang-up here is a failed response
    tap.feed(b"data: [DONE]\n\n", 0.1)
    assert tap.complete
    tap2 = ResponseTap(stream=True)
    tap2.feed(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n', 0.0)
    assert tap2.complete  # APIs without [DONE]: the finish reason ends the answer
    assert not ResponseTap(stream=False).complete  # a JSON body is complete only when read whole
