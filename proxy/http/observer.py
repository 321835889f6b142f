"""Forwarder hooks: how the policy watches traffic without being able to change it.

The types live in `proxy/contracts.py` (`RequestContext`, `RequestObserver`, `BodyRewriter`), so
that `proxy/runtime/` implements them without importing the HTTP layer; this module keeps the
no-op observer.

The forwarder owns the bytes; an observer only sees them. Each hook is called synchronously on the
request path, wrapped in try/except by the forwarder (a failing observer is counted in
`cachescout_policy_errors_total` and otherwise ignored), so observers must be O(microseconds) and
push anything heavier onto the executor queue. `NullObserver` is what runs when the policy is off
or failed to start.

One optional method is a Protocol of its own (`BodyRewriter.rewrite_body(ctx) -> bytes | None`). When
an observer has it, the forwarder calls it after `on_request` and forwards the returned bytes instead
of the client's (None = unchanged; an exception = unchanged + counted). It exists only for opt-in
engine hints the operator enabled (vLLM `kv_hints`, SGLang `priority`); by default the body is
forwarded byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping

from proxy.contracts import RequestContext


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
