"""Incremental Server-Sent Events parser for observers that watch streamed responses.

The forwarder relays SSE bytes untouched; observers that want the content (usage, finish_reason,
the assistant turn) feed each relayed chunk here. Chunks split anywhere — inside a line, between
`\\r` and `\\n`, inside a UTF-8 character — so the parser keeps the unfinished tail and only emits
complete events (terminated by a blank line), following the WHATWG EventSource rules: `\\r\\n`,
`\\r` and `\\n` all end a line, `:` starts a comment, multiple `data:` lines join with `\\n`, one
leading space after the colon is dropped. A pending line longer than `max_line_bytes` is dropped and
counted, and so is an event whose data grows past `max_event_bytes` (an observer must stay O(chunk)
in CPU and bounded in memory, whatever the upstream sends: a stream without separators or line ends
is neither rescanned nor kept). The unfinished tail is kept as a list of pieces, so a long line
arriving in many chunks costs O(total) once, not O(total^2). Used by `runtime/response_tap.py`.

Why at the package root (beside `contracts.py`): it was `proxy/http/sse.py`, but only the runtime's
response tap reads SSE (the forwarder relays the bytes untouched), so the runtime imported the http
layer above it; a neutral module keeps every arrow pointing down.
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
        except (ValueError, RecursionError):
            return None


class SSEParser:
    """Feed raw bytes, get complete events."""

    def __init__(self, max_line_bytes: int = 4 * 1024 * 1024, max_event_bytes: int | None = None) -> None:
        self.max_line_bytes = max_line_bytes
        self.max_event_bytes = max_event_bytes if max_event_bytes is not None else max_line_bytes
        self.dropped_lines = 0
        self.dropped_events = 0
        self._tail: list[bytes] = []  # pieces of the unfinished line
        self._tail_len = 0
        self._cr = False  # the last chunk ended in \r: a leading \n belongs to it
        self._data: list[str] = []
        self._data_len = 0
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._has_fields = False
        self._skipping = False  # inside an oversized line: discard up to its end
        self._oversized = False  # the current event's data overflowed: drop it at its end

    @property
    def buffered_bytes(self) -> int:
        """Bytes held between calls (unfinished line + pending event data)."""
        return self._tail_len + self._data_len

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        if not chunk:
            return events
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        last = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if last < 0:  # no line end in this chunk: only the tail grows
            self._grow_tail(chunk)
            return events
        head, rest = chunk[: last + 1], chunk[last + 1 :]
        self._cr = not rest and chunk.endswith(b"\r")  # maybe the first half of \r\n
        if self._skipping:
            match = _EOL.search(head)
            assert match is not None
            self._skipping = False
            head = head[match.end() :]
            self._drop_tail()
        elif self._tail:
            head = b"".join(self._tail) + head
            self._drop_tail()
        pos = 0
        for match in _EOL.finditer(head):
            self._line(head[pos : match.start()], events)
            pos = match.end()
        if rest:
            self._grow_tail(rest)
        return events

    def _grow_tail(self, piece: bytes) -> None:
        if self._skipping:
            return
        self._tail.append(piece)
        self._tail_len += len(piece)
        if self._tail_len > self.max_line_bytes:
            self.dropped_lines += 1
            self._skipping = True
            self._drop_tail()

    def _drop_tail(self) -> None:
        self._tail = []
        self._tail_len = 0

    def flush(self) -> list[SSEEvent]:
        """End of stream: a final unterminated line/event is still delivered."""
        events: list[SSEEvent] = []
        if self._tail and not self._skipping:
            self._line(b"".join(self._tail), events)
        self._drop_tail()
        self._skipping = False
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            if self._has_fields and self._data and not self._oversized:
                events.append(SSEEvent("\n".join(self._data), self._event or "message", self._id, self._retry))
            self._data = []
            self._data_len = 0
            self._oversized = False
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
            self._has_fields = True
            if self._oversized:
                return
            self._data_len += len(value)
            if self._data_len > self.max_event_bytes:
                self.dropped_events += 1
                self._oversized = True
                self._data = []
                self._data_len = 0
                return
            self._data.append(text)
        elif name == b"event":
            self._event = text
            self._has_fields = True
        elif name == b"id":
            if "\x00" not in text:
                self._id = text  # the last event id persists across events, as in EventSource
        elif name == b"retry" and text.isdigit():
            self._retry = int(text)
        # unknown fields are ignored
