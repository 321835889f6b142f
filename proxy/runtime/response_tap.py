"""Reads a response from the side: what the policy needs, without touching a byte the client gets.

Two shapes: a JSON body (buffered up to a cap, parsed once at the end) and an SSE stream (events
parsed as they pass, by the incremental `proxy.sse.SSEParser`). From either it extracts
finish_reason, usage (prompt, cached, completion tokens), the first-output time, and the assistant
turn — text plus tool calls reassembled from their streamed deltas — because a response that ends
in `tool_calls` pauses its session, and the assistant turn is the part of the next prompt the proxy
cannot see yet.

Bounded: each chunk costs O(chunk) (the SSE parser never rescans), a stream's pending line/event is
capped (`MAX_SSE_LINE_BYTES`), a JSON body is buffered only up to `MAX_JSON_BYTES` (it is parsed
on the event loop at the end), and all taps together hold at most `TapBudget.max_bytes`: a tap that
would exceed it stops reading (counted in `TapBudget.overflows`) and the response is forwarded as
always. Malformed or absurdly nested JSON (RecursionError) is ignored, never logged as a traceback.

The first-output time (`first_token_at`) is when prefill ended as far as the stream shows it: the
first chunk carrying content, a tool call or reasoning; or, with `role_is_first_output` (engines
whose role-only first chunk leaves with their first output: vLLM, SGLang, the simulated engine —
`HttpEngineAdapter.role_chunk_is_first_output`), that role chunk. The difference matters for a tool
call: its first `tool_calls` delta leaves only once the call's name is generated, several decode
steps after prefill, which would make prefill look slower and the request count as prefilling longer.
"""

from __future__ import annotations

import json

from proxy.runtime.api_outcomes import as_chat
from proxy.sse import SSEParser

MAX_JSON_BYTES = 1024 * 1024  # larger non-stream bodies are not parsed (still forwarded)
MAX_SSE_LINE_BYTES = 1024 * 1024  # a longer SSE line / event data is skipped
MAX_ASSISTANT_CHARS = 64 * 1024  # larger assistant turns are not kept for tool_resume
_BAD_JSON = (ValueError, RecursionError, TypeError, OverflowError)


class TapBudget:
    """Bytes held by all live taps together (buffered JSON bodies, pending SSE lines)."""

    __slots__ = ("max_bytes", "overflows", "used")

    def __init__(self, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self.overflows = 0


class ResponseTap:
    __slots__ = (
        "_budget",
        "_content",
        "_content_len",
        "_done",
        "_held",
        "_json_parts",
        "_json_size",
        "_message",
        "_off",
        "_overflow",
        "_parser",
        "_tool_calls",
        "cached_tokens",
        "finish_reason",
        "first_token_at",
        "frames",
        "output_tokens",
        "prompt_tokens",
        "role_is_first_output",
        "stream",
    )

    def __init__(self, stream: bool, budget: TapBudget | None = None, *, role_is_first_output: bool = False) -> None:
        self.stream = stream
        self.role_is_first_output = role_is_first_output
        self.first_token_at: float | None = None
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.output_tokens: int | None = None
        self.frames = 0
        self._done = False  # saw the stream's `data: [DONE]`
        self._parser = SSEParser(MAX_SSE_LINE_BYTES) if stream else None
        self._budget = budget
        self._held = 0  # bytes charged to the budget
        self._off = False  # stopped reading (over the shared budget)
        self._json_parts: list[bytes] = []
        self._json_size = 0
        self._content: list[str] = []
        self._content_len = 0
        self._tool_calls: dict[int, dict] = {}
        self._overflow = False
        self._message: dict | None = None

    # -- feeding ------------------------------------------------------------------------------------
    def feed(self, chunk: bytes, now: float) -> None:
        if self._off:
            return
        if not self.stream:
            if self._json_size + len(chunk) <= MAX_JSON_BYTES:
                self._json_parts.append(chunk)
            else:
                self._overflow = True
                self._json_parts = []
            self._json_size += len(chunk)
            if self.first_token_at is None and chunk:
                self.first_token_at = now
            self._charge(0 if self._overflow else self._json_size)
            return
        parser = self._parser
        assert parser is not None, "stream taps own a parser until close(), which sets _off"
        for event in parser.feed(chunk):
            self._event(event.data, now)
        self._charge(parser.buffered_bytes)

    def _charge(self, held: int) -> None:
        budget = self._budget
        if budget is None:
            return
        budget.used += held - self._held
        self._held = held
        if budget.used > budget.max_bytes:
            budget.overflows += 1
            self.close()
            self._off = True
            self._overflow = True

    def close(self) -> None:
        """Let go of every buffered byte (idempotent); the tap reads nothing more."""
        if self._budget is not None:
            self._budget.used -= self._held
        self._held = 0
        self._json_parts = []
        self._parser = None
        self._off = True

    def finish(self) -> None:
        if self._off:
            self.close()
            return
        if not self.stream:
            if self._json_parts and not self._overflow:
                try:
                    self._apply(json.loads(b"".join(self._json_parts)), None, stream=False)
                except _BAD_JSON:
                    pass
        else:
            assert self._parser is not None, "stream taps own a parser until close(), which sets _off"
            for event in self._parser.flush():
                self._event(event.data, None)
        self.close()

    # -- parsing --------------------------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        """The stream reached its end as the client sees it: `[DONE]`, or a choice's finish_reason
        (APIs without `[DONE]`). A client may hang up right after it, before the engine's end of the
        chunked body reaches the proxy: that response is complete, not failed."""
        return self.stream and (self._done or self.finish_reason is not None)

    def _event(self, data: str, now: float | None) -> None:
        if data.strip() == "[DONE]":
            self._done = True
            return
        try:
            obj = json.loads(data)
        except _BAD_JSON:
            return
        self.frames += 1
        self._apply(obj, now, stream=True)

    def _apply(self, obj: object, now: float | None, *, stream: bool) -> None:
        if not isinstance(obj, dict):
            return
        if "choices" not in obj and (converted := as_chat(obj)) is not None:  # /v1/responses, /v1/messages
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
            if (
                self.first_token_at is None
                and now is not None
                and (
                    content
                    or delta.get("tool_calls")
                    or delta.get("reasoning_content")
                    or (self.role_is_first_output and delta.get("role"))
                )
            ):
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

    def _add_tool_delta(self, tc: object) -> None:
        if not isinstance(tc, dict):
            return
        idx = tc.get("index", len(self._tool_calls))
        slot = self._tool_calls.setdefault(
            int(idx) if isinstance(idx, int) else 0,
            {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
        )
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


def _int(v: object, default: int | None) -> int | None:
    if isinstance(v, bool):
        return default
    if isinstance(v, (int, float)):
        return int(v)
    return default
