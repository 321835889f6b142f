"""What the live observer remembers about one client request in flight: `RequestState`.

Why its own module: the observer's hooks (`live_policy.py`), its opt-in body rewriting
(`body_rewrite.py`) and its usage/yield accounting (`live_accounting.py`) all read it, and it is
kept in the forwarder's `RequestContext.state` under `STATE_KEY`, so `request_state` narrows it back
to its type in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proxy.contracts import RequestContext
    from proxy.core.actions import ObservedRequest
    from proxy.core.view import RequestView
    from proxy.runtime.hint_inputs import RequestHints
    from proxy.runtime.response_tap import ResponseTap

STATE_KEY = "cachescout"  # RequestContext.state key


class RequestState:
    __slots__ = (
        "accepted",
        "alone",
        "done",
        "end",
        "engine_tag",
        "held",
        "hints",
        "observed",
        "parsing",
        "skip",
        "status",
        "tap",
        "view",
    )

    def __init__(self) -> None:
        self.alone = False
        self.held = False  # its blocks are counted in the running set
        self.hints: RequestHints | None = None
        self.view: RequestView | None = None
        self.observed: ObservedRequest | None = None
        self.tap: ResponseTap | None = None
        self.status: int | None = None
        self.skip = False
        self.accepted = False  # the engine answered 2xx: only then is the request learned
        self.parsing = False  # the view is being built on the worker thread
        self.end: tuple[str | None, float] | None = None  # (error, now) once the response ended
        self.done = False  # its response was observed
        self.engine_tag: str | None = None  # the session id it was forwarded with (engine_sessions.py)


def request_state(ctx: RequestContext) -> RequestState | None:
    """The observer's state of this request (None: `on_request` never ran for it)."""
    st = ctx.state.get(STATE_KEY)
    return st if isinstance(st, RequestState) else None
