"""Forwarder hooks: how the policy watches traffic without being able to change it.

The forwarder owns the bytes; an observer only sees them. Each hook is called synchronously on the
request path, wrapped in try/except by the forwarder (a failing observer is counted in
`cachescout_policy_errors_total` and otherwise ignored), so observers must be O(microseconds) and
push anything heavier onto the executor queue. `NullObserver` is what runs when the policy is off
or failed to start.

One optional method is not part of the Protocol: `rewrite_body(ctx) -> bytes | None`. When an
observer defines it, the forwarder calls it after `on_request` and forwards the returned bytes instead
of the client's (None = unchanged; an exception = unchanged + counted). It exists only for opt-in
engine hints the operator enabled (vLLM `kv_hints`, SGLang `priority`); by default the body is
forwarded byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(slots=True)
class RequestContext:
    """One client request as received. Created by the forwarder, shared with every hook."""

    request_id: int
    method: str
    path: str  # e.g. "/v1/chat/completions" (no query string)
    headers: Mapping[str, str]  # lower-cased names, as received
    body: bytes  # exactly as received (never re-serialised)
    json: Any | None  # parsed copy when the body is JSON, else None
    started: float  # clock() at receipt
    state: dict = field(default_factory=dict)  # scratch space for the observer
    body_size: int = -1  # >= 0: a body too large to hand over (relayed as chunks; `body` is b"")


@runtime_checkable
class RequestObserver(Protocol):
    """What the forwarder calls. All times come from the app's clock."""

    def on_request(self, ctx: RequestContext) -> None: ...

    def on_response_start(self, ctx: RequestContext, status: int, headers: Mapping[str, str], now: float) -> None: ...

    def on_response_chunk(self, ctx: RequestContext, chunk: bytes, now: float) -> None: ...

    def on_response_end(self, ctx: RequestContext, error: str | None, now: float) -> None: ...


class NullObserver:
    """Sees everything, does nothing: the pass-through proxy."""

    def on_request(self, ctx: RequestContext) -> None:
        return None

    def on_response_start(self, ctx: RequestContext, status: int, headers: Mapping[str, str], now: float) -> None:
        return None

    def on_response_chunk(self, ctx: RequestContext, chunk: bytes, now: float) -> None:
        return None

    def on_response_end(self, ctx: RequestContext, error: str | None, now: float) -> None:
        return None
