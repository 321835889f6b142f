"""The incremental SSE parser: any split of a stream yields the events of the whole stream."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.sse import SSEEvent, SSEParser

STREAM = (
    b'data: {"id":"c1","choices":[{"delta":{"content":"h\xc3\xa9"}}]}\r\n\r\n'
    b": keep-alive comment\n\n"
    b"event: progress\nid: 7\nretry: 1500\ndata: line one\ndata:line two\n\n"
    b"data: [DONE]\r\r"
)
EXPECTED = [
    SSEEvent('{"id":"c1","choices":[{"delta":{"content":"hé"}}]}'),
    SSEEvent("line one\nline two", event="progress", id="7", retry=1500),
    SSEEvent("[DONE]", id="7"),
]


def parse_in_pieces(data: bytes, cuts: list[int]) -> list[SSEEvent]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    last = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        events += parser.feed(data[last:cut])
        last = cut
    return events + parser.flush()


def test_whole_stream() -> None:
    events = parse_in_pieces(STREAM, [])
    assert events == EXPECTED
    assert events[0].json()["choices"][0]["delta"]["content"] == "hé"
    assert events[2].is_done and events[2].json() is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_any_split_gives_the_same_events(cuts: list[int]) -> None:
    assert parse_in_pieces(STREAM, cuts) == EXPECTED


def test_byte_by_byte_including_crlf_split() -> None:
    parser = SSEParser()
    events = []
    for i in range(len(STREAM)):
        events += parser.feed(STREAM[i : i + 1])
    assert events + parser.flush() == EXPECTED


def test_unterminated_final_event_only_on_flush() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: tail") == []
    assert parser.flush() == [SSEEvent("tail")]


def test_oversized_line_is_dropped_and_counted() -> None:
    parser = SSEParser(max_line_bytes=16)
    assert parser.feed(b"data: " + b"x" * 64) == []
    assert parser.dropped_lines == 1
    assert parser.feed(b"data: still the same huge line") == []  # not mistaken for a new field
    assert parser.feed(b"\n\ndata: ok\n\n") == [SSEEvent("ok")]


def test_separator_less_stream_is_linear_and_bounded() -> None:
    """16 MiB without a single line end: every chunk is O(chunk), nothing beyond the cap is kept."""
    import time

    parser = SSEParser(max_line_bytes=1 << 20)
    chunk = b"x" * 65536
    t0 = time.process_time()
    for _ in range(256):
        assert parser.feed(chunk) == []
        assert parser.buffered_bytes <= (1 << 20) + len(chunk)
    assert time.process_time() - t0 < 2.0  # quadratic rescanning took ~20 s here
    assert parser.dropped_lines == 1
    assert parser.feed(b"\n\ndata: ok\n\n") == [SSEEvent("ok")]


def test_event_with_endless_data_lines_is_dropped() -> None:
    parser = SSEParser(max_line_bytes=64, max_event_bytes=100)
    for _ in range(50):
        assert parser.feed(b"data: 0123456789\n") == []
    assert parser.buffered_bytes <= 100 and parser.dropped_events == 1
    assert parser.feed(b"\ndata: next\n\n") == [SSEEvent("next")]
