"""Which headers cross the proxy's hop, and the request's declared length.

Why apart from the forwarder: these are RFC 9110 rules, not forwarding flow. Hop-by-hop headers
(section 7.6.1), and any header a `Connection:` field names, belong to one connection and are
dropped in both directions (`filter_headers`); a request also loses the few the upstream hop
recomputes or that were already answered (`REQUEST_DROP`).
"""

from __future__ import annotations

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Host and Content-Length are recomputed for the upstream hop; Expect was answered by our server
# (the body is already read), so passing it on would make the engine wait for nothing.
REQUEST_DROP = HOP_BY_HOP | {b"host", b"content-length", b"expect"}


def _connection_tokens(value: bytes) -> set[bytes]:
    return {t.strip().lower() for t in value.split(b",") if t.strip()}


def filter_headers(raw: list[tuple[bytes, bytes]], drop: frozenset[bytes]) -> list[tuple[bytes, bytes]]:
    """Drop hop-by-hop headers (plus `drop`), including any named in `Connection:`. Order is kept."""
    extra: set[bytes] = set()
    out = []
    for name, value in raw:
        lname = name.lower()
        if lname in drop:
            if lname == b"connection":
                extra |= _connection_tokens(value)
            continue
        out.append((name, value))
    if extra:
        out = [(n, v) for n, v in out if n.lower() not in extra]
    return out


RESPONSE_DROP = HOP_BY_HOP


def content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
