"""Responses API and Anthropic Messages bodies as the chat-completions request vLLM renders.

Why: vLLM serves `/v1/responses` and `/v1/messages` by converting them to chat messages and
applying the same chat template (vLLM `entrypoints/openai/responses/utils.py`
`construct_input_messages`, and `AnthropicServingMessages._convert_anthropic_to_openai_request`).
Converting them here the same way gives one canonical chain per prompt whichever API sent it (the
same agent is recognised on all three), and a warmup that rebuilds the engine's exact tokens
through `/tokenize` with chat messages.

Responses: `instructions` -> a system message; `input` string -> a user message; input items:
messages as they are (text parts joined, as vLLM's string-content templates see them),
`function_call` -> an assistant `tool_calls` entry (merged into a preceding assistant message),
`function_call_output` -> a `tool` message; reasoning items are skipped; function tools
`{type, name, description, parameters}` -> chat tools `{type: function, function: {...}}`.

`previous_response_id`: vLLM prepends the stored conversation (minus its system message) between
the instructions and the new input. The proxy does not see that history, so the view's chain stops
after the instructions (the only part that is a true prefix of the engine's prompt) and is marked
``hidden_history``: the agent can still be found and warmed at its instructions, but the session's
context cannot be rebuilt, extended or warmed (no tool_resume), and its blocks beyond the
instructions are invisible to the residency shadow.

Messages: `system` (string or text blocks, concatenated) -> a system message; content blocks:
text -> text, `tool_use` -> assistant `tool_calls` (arguments = json.dumps(input)), `tool_result`
in a user turn -> a `tool` message; tools `{name, description, input_schema}` -> chat tools.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypedDict


class ChatBody(TypedDict):
    """A chat-completions body {model, messages, tools} converted from another API's body."""

    model: object
    messages: list[dict[str, object]]
    tools: list[dict[str, object]] | None


class ShapeError(ValueError):
    """The body is not a shape this module converts."""


def _text_of(content: Any) -> str | None:
    """Joined text of a list of text-like parts (input_text, output_text, text); None if other parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    out = []
    for part in content:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, Mapping) and part.get("type") in ("input_text", "output_text", "text"):
            out.append(str(part.get("text", "")))
        else:
            return None
    return "\n".join(out)


def responses_tools(tools: object) -> list[dict[str, object]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ShapeError("tools must be a list")
    out: list[dict[str, object]] = []
    for t in tools:
        if not isinstance(t, Mapping):
            raise ShapeError("tool is not an object")
        if t.get("type") == "function" and "function" not in t:
            fn = {k: t[k] for k in ("name", "description", "parameters") if t.get(k) is not None}
            out.append({"type": "function", "function": fn})
        else:
            out.append(dict(t))  # built-in tools: kept as they are (hashed, not rendered)
    return out or None


def responses_to_chat(body: Mapping[str, object]) -> tuple[ChatBody, bool]:
    """(chat body {model, messages, tools}, hidden_history)."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    hidden = isinstance(body.get("previous_response_id"), str) and bool(body.get("previous_response_id"))
    inp = body.get("input")
    if not hidden:
        if isinstance(inp, str):
            messages.append({"role": "user", "content": inp})
        elif isinstance(inp, list):
            for item in inp:
                _response_item(item, messages)
        else:
            raise ShapeError("input must be a string or a list")
    if not messages:
        raise ShapeError("nothing to render")
    return {"model": body.get("model"), "messages": messages, "tools": responses_tools(body.get("tools"))}, hidden


def _response_item(item: Any, messages: list[dict[str, Any]]) -> None:
    if not isinstance(item, Mapping):
        raise ShapeError("input item is not an object")
    kind = item.get("type", "message")
    prev = messages[-1] if messages and messages[-1].get("role") == "assistant" else None
    if kind == "function_call":
        call = {
            "id": item.get("call_id"),
            "type": "function",
            "function": {"name": item.get("name"), "arguments": item.get("arguments")},
        }
        if prev is not None:
            prev.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "tool_calls": [call]})
    elif kind == "function_call_output":
        messages.append({"role": "tool", "content": item.get("output"), "tool_call_id": item.get("call_id")})
    elif kind == "reasoning":
        return
    elif kind == "message":
        role = item.get("role")
        if not isinstance(role, str):
            raise ShapeError("message item without role")
        text = _text_of(item.get("content"))
        content = text if text is not None else item.get("content")
        if role == "assistant" and prev is not None and prev.get("content") is None:
            prev["content"] = content
            return
        messages.append({"role": role, "content": content})
    else:
        raise ShapeError(f"unsupported input item {kind!r}")


def messages_to_chat(body: Mapping[str, object]) -> ChatBody:
    """An Anthropic /v1/messages body as a chat body {model, messages, tools}."""
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, str) and system:
        out.append({"role": "system", "content": system})
    elif isinstance(system, list):
        text = "".join(str(b.get("text", "")) for b in system if isinstance(b, Mapping) and b.get("type") == "text")
        out.append({"role": "system", "content": text})
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ShapeError("messages must be a non-empty list")
    for m in msgs:
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ShapeError("message without role")
        role, content = m["role"], m.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise ShapeError("content must be a string or blocks")
        msg: dict[str, Any] = {"role": role}
        parts: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for b in content:
            if not isinstance(b, Mapping):
                raise ShapeError("content block is not an object")
            t = b.get("type")
            if t == "text" and b.get("text"):
                parts.append({"type": "text", "text": b["text"]})
            elif t == "tool_use":
                calls.append(
                    {
                        "id": b.get("id"),
                        "type": "function",
                        "function": {"name": b.get("name") or "", "arguments": json.dumps(b.get("input") or {})},
                    }
                )
            elif t == "tool_result":
                res = b.get("content")
                if role == "user":
                    out.append(
                        {
                            "role": "tool",
                            "tool_call_id": b.get("tool_use_id") or b.get("id") or "",
                            "content": str(res) if res else "",
                        }
                    )
                else:
                    parts.append({"type": "text", "text": f"Tool result: {str(res) if res else ''}"})
            elif t in ("image", "thinking", "redacted_thinking"):
                parts.append({"type": str(t)})
        if calls:
            msg["tool_calls"] = calls
        if parts:
            msg["content"] = parts[0]["text"] if len(parts) == 1 and parts[0].get("type") == "text" else parts
        elif not calls:
            continue
        out.append(msg)
    tools = body.get("tools")
    chat_tools: list[dict[str, object]] | None = None
    if isinstance(tools, list) and tools:
        chat_tools = [
            {
                "type": "function",
                "function": {
                    "name": t.get("name"),
                    "description": t.get("description"),
                    "parameters": t.get("input_schema"),
                },
            }
            for t in tools
            if isinstance(t, Mapping)
        ]
    return {"model": body.get("model"), "messages": out, "tools": chat_tools}
