"""The seams between the proxy's layers: what the forwarder hands an observer, and what the
observer asks of the action executor.

Why a neutral module: `proxy/http/` (the forwarder) calls the hooks and `proxy/runtime/` (the live
policy) implements them; neither should import the other to name the types they exchange. Each
interface here is a small Protocol, so a test double or a different policy fits it without
inheriting anything, and the callers need no `getattr` probing.

- `RequestContext`: one client request as received (created by the forwarder, shared with every hook).
- `RequestObserver`: the four hooks the forwarder calls on the request path (docs/architecture.md).
- `BodyRewriter`: the one optional hook, `rewrite_body`, for the opt-in engine hints; the forwarder
  checks for it once, when its observer is set, not per request.
- `HeaderAdder`: the other optional hook, `forward_headers`: headers added to the forwarded request
  (the proxy's inferred session id as `X-Session-ID`, a lane's `X-Vllm-Priority`); never replaces
  one the client sent.
- `ActionSink`: what the observer needs of the executor — queue actions, and how many are on the
  wire (a request arriving while none is counts as "alone" for the prefill-rate estimate).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from proxy.core.actions import Action


@dataclass(slots=True)
class RequestContext:
    """One client request as received. Created by the forwarder, shared with every hook."""

    request_id: int
    method: str
    path: str  # e.g. "/v1/chat/completions" (no query string)
    headers: Mapping[str, str]  # lower-cased names, as received
    body: bytes  # exactly as received (never re-serialised)
    json: object  # parsed copy when the body is JSON, else None
    started: float  # clock() at receipt
    state: dict[str, object] = field(default_factory=dict)  # scratch space for the observer
    body_size: int = -1  # >= 0: a body too large to hand over (relayed as chunks; `body` is b"")


@runtime_checkable
class RequestObserver(Protocol):
    """What the forwarder calls. All times come from the app's clock."""

    def on_request(self, ctx: RequestContext) -> None: ...

    def on_response_start(self, ctx: RequestContext, status: int, headers: Mapping[str, str], now: float) -> None: ...

    def on_response_chunk(self, ctx: RequestContext, chunk: bytes, now: float) -> None: ...

    def on_response_end(self, ctx: RequestContext, error: str | None, now: float) -> None: ...


@runtime_checkable
class BodyRewriter(Protocol):
    """Optional observer hook: the bytes to forward instead of the client's (None = unchanged)."""

    def rewrite_body(self, ctx: RequestContext) -> bytes | None: ...


@runtime_checkable
class HeaderAdder(Protocol):
    """Optional observer hook: headers to add to the forwarded request (the body stays as it is).

    Called after `rewrite_body`, before the request goes upstream, synchronously: it must not block.
    A name the client's request already carries is never replaced (the forwarder drops it from the
    returned list); None, an empty list or an exception forwards the client's headers unchanged."""

    def forward_headers(self, ctx: RequestContext) -> list[tuple[str, str]] | None: ...


class ActionSink(Protocol):
    """The executor as the observer sees it (`runtime/executor.ActionExecutor` implements it)."""

    @property
    def sending(self) -> int:
        """Actions on the wire now (inside the adapter's warm)."""
        ...

    def submit(self, actions: Iterable[Action]) -> int:
        """Queue actions without blocking; returns how many were queued."""
        ...
