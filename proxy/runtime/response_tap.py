"""Reads a response from the side: what the policy needs, without touching a byte the client gets.

Two shapes: a JSON body (buffered up to a cap, parsed once at the end) and an SSE stream (frames
parsed as they pass). From either it extracts finish_reason, usage (prompt, cached, completion
tokens), the first-token time, and the assistant turn — text plus tool calls reassembled from their
streamed deltas — because a response that ends in `tool_calls` pauses its session, and the
assistant turn is the part of the next prompt the proxy cannot see yet.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.runtime.api_outcomes import as_chat

MAX_JSON_BYTES = 4 * 1024 * 1024      # larger non-stream bodies are not parsed (still forwarded)
MAX_ASSISTANT_CHARS = 64 * 1024       # larger assistant turns are not kept for tool_resume


class ResponseTap:
    __slots__ = ("stream", "first_token_at", "finish_reason", "prompt_tokens", "cached_tokens",
                 "output_tokens", "_buf", "_json_parts", "_json_size", "_content", "_content_len",
                 "_tool_calls", "_overflow", "frames", "_message")

    def __init__(self, stream: bool) -> None:
        self.stream = stream
        self.first_token_at: float | None = None
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.output_tokens: int | None = None
        self.frames = 0
        self._buf = b""
        self._json_parts: list[bytes] = []
        self._json_size = 0
        self._content: list[str] = []
        self._content_len = 0
        self._tool_calls: dict[int, dict] = {}
        self._overflow = False
        self._message: dict | None = None

    # -- feeding ------------------------------------------------------------------------------------
    def feed(self, chunk: bytes, now: float) -> None:
        if not self.stream:
            if self._json_size + len(chunk) <= MAX_JSON_BYTES:
                self._json_parts.append(chunk)
            else:
                self._overflow = True
            self._json_size += len(chunk)
            if self.first_token_at is None and chunk:
                self.first_token_at = now
            return
        self._buf += chunk
        while True:
            cut = _frame_end(self._buf)
            if cut is None:
                break
            frame, self._buf = self._buf[:cut[0]], self._buf[cut[1]:]
            self._frame(frame, now)

    def finish(self) -> None:
        if not self.stream:
            if self._json_parts and not self._overflow:
                try:
                    self._apply(json.loads(b"".join(self._json_parts)), None, stream=False)
                except ValueError:
                    pass
            self._json_parts = []
        elif self._buf.strip():
            self._frame(self._buf, None)
            self._buf = b""

    # -- parsing --------------------------------------------------------------------------------------
    def _frame(self, frame: bytes, now: float | None) -> None:
        data_lines = [line[5:].lstrip() for line in frame.replace(b"\r\n", b"\n").split(b"\n")
                      if line.startswith(b"data:")]
        if not data_lines:
            return
        data = b"\n".join(data_lines)
        if data.strip() == b"[DONE]":
            return
        try:
            obj = json.loads(data)
        except ValueError:
            return
        self.frames += 1
        self._apply(obj, now, stream=True)

    def _apply(self, obj: Any, now: float | None, *, stream: bool) -> None:
        if not isinstance(obj, dict):
            return
        if "choices" not in obj and (converted := as_chat(obj)) is not None:   # /v1/responses, /v1/messages
            obj, stream = converted, False
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _int(usage.get("prompt_tokens"), self.prompt_tokens)
            self.output_tokens = _int(usage.get("completion_tokens"), self.output_tokens)
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else usage.get("cached_tokens")
            self.cached_tokens = _int(cached, self.cached_tokens)
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        if not stream:
            msg = choice.get("message")
            if isinstance(msg, dict):
                self._message = msg
            return
        delta = choice.get("delta")
        text = choice.get("text")
        if isinstance(delta, dict):
            content = delta.get("content")
            if content:
                self._add_text(content)
            for tc in delta.get("tool_calls") or ():
                self._add_tool_delta(tc)
            if self.first_token_at is None and now is not None and (content or delta.get("tool_calls")
                                                                    or delta.get("reasoning_content")):
                self.first_token_at = now
        elif isinstance(text, str) and text:
            self._add_text(text)
            if self.first_token_at is None and now is not None:
                self.first_token_at = now

    def _add_text(self, text: str) -> None:
        self._content_len += len(text)
        if self._content_len <= MAX_ASSISTANT_CHARS:
            self._content.append(text)
        else:
            self._overflow = True

    def _add_tool_delta(self, tc: Any) -> None:
        if not isinstance(tc, dict):
            return
        idx = tc.get("index", len(self._tool_calls))
        slot = self._tool_calls.setdefault(int(idx) if isinstance(idx, int) else 0,
                                           {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        if tc.get("id"):
            slot["id"] = tc["id"]
        fn = tc.get("function") or {}
        if fn.get("name"):
            slot["function"]["name"] += fn["name"]
        if fn.get("arguments"):
            self._content_len += len(fn["arguments"])
            slot["function"]["arguments"] += fn["arguments"]

    # -- result -----------------------------------------------------------------------------------------
    def assistant_message(self) -> dict | None:
        """The assistant turn as a client would echo it back, or None when unknown or too large."""
        if self._overflow:
            return None
        if self._message is not None:
            msg = {"role": "assistant", "content": self._message.get("content")}
            if self._message.get("tool_calls"):
                msg["tool_calls"] = self._message["tool_calls"]
            return msg
        if not self._content and not self._tool_calls:
            return None
        msg = {"role": "assistant", "content": "".join(self._content) or None}
        if self._tool_calls:
            msg["tool_calls"] = [self._tool_calls[i] for i in sorted(self._tool_calls)]
        return msg


def _frame_end(buf: bytes) -> tuple[int, int] | None:
    """(end of frame, start of next) for the first blank-line separator, or None."""
    best: tuple[int, int] | None = None
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        i = buf.find(sep)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, i + len(sep))
    return best


def _int(v: Any, default: int | None) -> int | None:
    if isinstance(v, bool):
        return default
    if isinstance(v, (int, float)):
        return int(v)
    return default
