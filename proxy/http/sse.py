"""Incremental Server-Sent Events parser for observers that watch streamed responses.

The forwarder relays SSE bytes untouched; observers that want the content (usage, finish_reason,
the assistant turn) feed each relayed chunk here. Chunks split anywhere — inside a line, between
`\\r` and `\\n`, inside a UTF-8 character — so the parser keeps the unfinished tail and only emits
complete events (terminated by a blank line), following the WHATWG EventSource rules: `\\r\\n`,
`\\r` and `\\n` all end a line, `:` starts a comment, multiple `data:` lines join with `\\n`, one
leading space after the colon is dropped. A pending line longer than `max_line_bytes` is dropped and
counted (an observer must stay O(chunk), whatever the upstream sends).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_EOL = re.compile(rb"\r\n|\r|\n")
DONE = "[DONE]"


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None

    @property
    def is_done(self) -> bool:
        """OpenAI's end-of-stream sentinel `data: [DONE]`."""
        return self.data == DONE

    def json(self) -> Any | None:
        """The data parsed as JSON, or None (the [DONE] sentinel, or not JSON)."""
        if self.is_done:
            return None
        try:
            return json.loads(self.data)
        except ValueError:
            return None


class SSEParser:
    """Feed raw bytes, get complete events."""

    def __init__(self, max_line_bytes: int = 4 * 1024 * 1024) -> None:
        self.max_line_bytes = max_line_bytes
        self.dropped_lines = 0
        self._tail = b""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._has_fields = False
        self._skipping = False  # inside an oversized line: discard up to its end

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buf = self._tail + chunk if self._tail else chunk
        events: list[SSEEvent] = []
        if self._skipping:
            match = _EOL.search(buf)
            if match is None:
                self._tail = b""
                return events
            self._skipping = False
            buf = buf[match.end():]
        pos = 0
        n = len(buf)
        for match in _EOL.finditer(buf):
            if match.group() == b"\r" and match.end() == n:
                break  # maybe the first half of \r\n: wait for the next chunk
            self._line(buf[pos:match.start()], events)
            pos = match.end()
        tail = buf[pos:]
        if len(tail) > self.max_line_bytes:
            self.dropped_lines += 1
            self._skipping = True
            tail = b""
        self._tail = tail
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: a final unterminated line/event is still delivered."""
        events: list[SSEEvent] = []
        if self._tail and not self._skipping:
            self._line(self._tail, events)
            self._tail = b""
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            if self._has_fields and self._data:
                events.append(SSEEvent("\n".join(self._data), self._event or "message", self._id, self._retry))
            self._data = []
            self._event = ""
            self._retry = None
            self._has_fields = False
            return
        if line[:1] == b":":
            return  # comment / keep-alive
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        text = value.decode("utf-8", errors="replace")
        if name == b"data":
            self._data.append(text)
            self._has_fields = True
        elif name == b"event":
            self._event = text
            self._has_fields = True
        elif name == b"id":
            if "\x00" not in text:
                self._id = text  # the last event id persists across events, as in EventSource
        elif name == b"retry":
            if text.isdigit():
                self._retry = int(text)
        # unknown fields are ignored
