"""Responses-API and Anthropic-Messages response bodies as the chat fields the response tap reads.

Why: the policy learns from finish reasons and usage (a `tool_calls` finish pauses a session; the
cached-token count measures conversions). `/v1/responses` reports `status` + output items and
`usage.input_tokens`/`input_tokens_details.cached_tokens`; `/v1/messages` reports `stop_reason` and
`usage.input_tokens`/`cache_read_input_tokens`. This maps both onto the chat-completions shape
(finish_reason, prompt/cached/completion tokens, the assistant turn) so the tap stays one parser.
A streamed Responses body ends with a `response.completed` (or `.incomplete`) event whose
`response` is the same object.
"""

from __future__ import annotations

_ANTHROPIC_STOP = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}


def as_chat(obj: dict) -> dict | None:
    """A chat-completions-shaped dict for a Responses / Messages body (or stream event); None if neither."""
    if obj.get("type") in ("response.completed", "response.incomplete") and isinstance(obj.get("response"), dict):
        obj = obj["response"]
    if obj.get("object") == "response":
        return _responses(obj)
    if obj.get("type") == "message" and "stop_reason" in obj:
        return _messages(obj)
    return None


def _usage(u: object, cached_key: str) -> dict | None:
    if not isinstance(u, dict):
        return None
    details = u.get("input_tokens_details")
    cached = details.get(cached_key) if isinstance(details, dict) else u.get(cached_key)
    return {
        "prompt_tokens": u.get("input_tokens"),
        "completion_tokens": u.get("output_tokens"),
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _responses(obj: dict) -> dict:
    calls, text = [], []
    for item in obj.get("output") or ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call":
            calls.append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")},
                }
            )
        elif item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") == "output_text":
                    text.append(str(part.get("text", "")))
    status = obj.get("status")
    finish = (
        "tool_calls" if calls else ("length" if status == "incomplete" else "stop" if status == "completed" else None)
    )
    msg: dict = {"role": "assistant", "content": "".join(text) if text else None}
    if calls:
        msg["tool_calls"] = calls
    out: dict = {"choices": [{"finish_reason": finish, "message": msg}]}
    u = _usage(obj.get("usage"), "cached_tokens")
    if u is not None:
        out["usage"] = u
    return out


def _messages(obj: dict) -> dict:
    import json

    calls, text = [], []
    for b in obj.get("content") or ():
        if isinstance(b, dict) and b.get("type") == "tool_use":
            calls.append(
                {
                    "id": b.get("id"),
                    "type": "function",
                    "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})},
                }
            )
        elif isinstance(b, dict) and b.get("type") == "text":
            text.append(str(b.get("text", "")))
    msg: dict = {"role": "assistant", "content": "".join(text) if text else None}
    if calls:
        msg["tool_calls"] = calls
    out: dict = {"choices": [{"finish_reason": _ANTHROPIC_STOP.get(str(obj.get("stop_reason"))), "message": msg}]}
    u = _usage(obj.get("usage"), "cache_read_input_tokens")
    if u is not None:
        out["usage"] = u
    return out
