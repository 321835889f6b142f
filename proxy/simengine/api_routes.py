"""The simulated engine's `/v1/responses` and `/v1/messages`: converted to chat, shaped back.

Why: vLLM serves both by converting the body to chat messages and running its chat path (same
chat template, same prefix cache), so the simulator does the same with the proxy's own converter
(`proxy.core.api_shapes`, which follows vLLM's rules): a Responses-API or Messages workload then
caches exactly like its chat-completions twin, and the proxy's warmups (chat `/tokenize` of the
converted messages) reproduce its prompt tokens.

`previous_response_id` works as in vLLM with `store`: the simulator keeps each response's
conversation (bounded, newest `STORE_MAX`) and prepends it, minus its system message, between the
new instructions and the new input. Streaming is not simulated on these two routes (400).
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from proxy.core.api_shapes import ShapeError, messages_to_chat, responses_to_chat
from proxy.simengine.generation import Output
from proxy.simengine.openai_io import ApiError

STORE_MAX = 1024


class ResponseStore:
    """Bounded response id -> the conversation it ended (chat messages, no system message)."""

    def __init__(self, max_entries: int = STORE_MAX) -> None:
        self._d: OrderedDict[str, list[dict]] = OrderedDict()
        self._max = max_entries

    def get(self, rid: str) -> list[dict] | None:
        return self._d.get(rid)

    def put(self, rid: str, messages: list[dict]) -> None:
        self._d[rid] = messages
        while len(self._d) > self._max:
            self._d.popitem(last=False)


def _envelope(body: Mapping, chat: Mapping[str, object], max_key: str) -> dict:
    if body.get("stream"):
        raise ApiError("streaming is not supported on this route by the simulated engine", param="stream")
    out = {k: v for k, v in chat.items() if v is not None}
    for k in ("model", "cache_salt", "priority", "temperature", "ignore_eos", "min_tokens"):
        if body.get(k) is not None:
            out[k] = body[k]
    if body.get(max_key) is not None:
        out["max_tokens"] = body[max_key]
    if body.get("tool_choice") is not None and out.get("tools"):
        choice = body["tool_choice"]
        if isinstance(choice, Mapping):  # {type: function|tool, name} -> chat form
            choice = {"type": "function", "function": {"name": choice.get("name")}}
        elif choice == "any":
            choice = "required"
        out["tool_choice"] = choice
    return out


def responses_chat_body(body: Any, store: ResponseStore) -> dict:
    if not isinstance(body, Mapping):
        raise ApiError("request body must be a JSON object")
    prev = body.get("previous_response_id")
    try:
        chat, _hidden = responses_to_chat({k: v for k, v in body.items() if k != "previous_response_id"})
    except ShapeError as exc:
        raise ApiError(str(exc), param="input") from exc
    if isinstance(prev, str) and prev:
        history = store.get(prev)
        if history is None:
            raise ApiError(f"Response with id '{prev}' not found.", status=404, param="previous_response_id")
        msgs = chat["messages"]
        n_sys = 1 if msgs and msgs[0]["role"] == "system" and body.get("instructions") else 0
        chat["messages"] = msgs[:n_sys] + [m for m in history if m.get("role") != "system"] + msgs[n_sys:]
    return _envelope(body, chat, "max_output_tokens")


def messages_chat_body(body: Any) -> dict:
    if not isinstance(body, Mapping):
        raise ApiError("request body must be a JSON object")
    try:
        chat = messages_to_chat(body)
    except ShapeError as exc:
        raise ApiError(str(exc), param="messages") from exc
    return _envelope(body, chat, "max_tokens")


def responses_body(
    chat: dict, out: Output, n_out: int, prompt: int, cached: int, model: str, store: ResponseStore
) -> dict:
    rid = "resp_" + uuid.uuid4().hex
    text = "".join(out.pieces[:n_out])
    items: list[dict] = []
    assistant: dict[str, Any] = {"role": "assistant", "content": None}
    if out.tool_call is not None:
        name, args = out.tool_call
        call_id = "call_" + uuid.uuid4().hex[:24]
        items.append(
            {
                "type": "function_call",
                "id": "fc_" + uuid.uuid4().hex[:24],
                "call_id": call_id,
                "name": name,
                "arguments": args,
                "status": "completed",
            }
        )
        assistant["tool_calls"] = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}]
    else:
        items.append(
            {
                "type": "message",
                "id": "msg_" + uuid.uuid4().hex[:24],
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
        assistant["content"] = text
    store.put(rid, [*chat["messages"], assistant])
    incomplete = out.finish_reason == "length"
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "output": items,
        "tools": chat.get("tools") or [],
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": n_out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + n_out,
        },
    }


_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def messages_body(out: Output, n_out: int, prompt: int, cached: int, model: str) -> dict:
    content: list[dict] = []
    if out.tool_call is not None:
        import json

        name, args = out.tool_call
        content.append(
            {
                "type": "tool_use",
                "id": "toolu_" + uuid.uuid4().hex[:24],
                "name": name,
                "input": json.loads(args) if args else {},
            }
        )
    else:
        content.append({"type": "text", "text": "".join(out.pieces[:n_out])})
    return {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP.get(out.finish_reason, "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": n_out, "cache_read_input_tokens": cached},
    }
