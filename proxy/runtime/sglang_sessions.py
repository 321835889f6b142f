"""The live side of SGLang's session radix cache: tag forwarded requests, close finished sessions.

Why here: the decision is pure (`proxy/core/session_close.py`); this module feeds it the observer's
request and response events and executes what it returns through the SGLang adapter
(`SglangAdapter.session_fields` / `close_session`). Opt-in (`sglang_sessions`) because SGLang reads a
request's session only from its body (`session_id`): tagging alters the forwarded bytes, as the other
opt-in body rewrites do (`body_rewrite.py`).

Session ids: the engine sees `engine_id(tenant, session_key)` — an opaque id: `LiveRuntime` passes
the id the proxy's `X-Session-ID` carries for that conversation (`core/session_tags.py`'s tag book)
where one is bound, else the core's own session key, itself an opaque counter-derived id, never
prompt text. Only sessions the proxy tagged
are ever closed, and never one the client named itself (its `session_id` passes unchanged and is
the client's to close).

Fail-open: a close that fails only leaves the session's KV ranked as live in SGLang; nothing here
touches a client's request beyond the one added field. Closes run off the plan tick, one batch at
a time (`max_closes_per_tick`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from proxy.core.session_close import CloseParams, SessionCloser

log = logging.getLogger("cachescout.runtime.sglang_sessions")

TAGGED_MAX = 16_384  # engine ids remembered as tagged by us (bounded; oldest forgotten)


class SessionCacheAdapter(Protocol):
    def session_fields(self, session_id: str | None, body: Any) -> dict[str, Any]: ...
    async def close_session(self, session_id: str) -> bool: ...


def default_engine_id(tenant: str, session_key: str) -> str:
    """The core's session key as the engine's session id (replaced at merge by the salted one)."""
    return session_key


class SessionCacheDriver:
    """Tags requests with the proxy's sessions and closes the ones `SessionCloser` judges finished."""

    def __init__(
        self,
        adapter: SessionCacheAdapter,
        params: CloseParams | None = None,
        engine_id: Callable[[str, str], str] = default_engine_id,
        max_closes_per_tick: int = 32,
    ) -> None:
        self.adapter = adapter
        self.closer = SessionCloser(params)
        self.engine_id = engine_id
        self.max_closes_per_tick = max_closes_per_tick
        self._tagged: OrderedDict[tuple[str, str], str] = OrderedDict()  # (tenant, key) -> engine id
        self._task: asyncio.Task[int] | None = None
        self.counts = {"tagged": 0, "closed": 0, "close_failed": 0, "client_named": 0}

    # -- the forwarded body -------------------------------------------------------------------------
    def fields(self, tenant: str, session_key: str | None, body: Any) -> dict[str, Any]:
        """The field to add to a forwarded body for the session it continues ({} for none)."""
        if isinstance(body, dict) and ("session_id" in body or body.get("session_params") is not None):
            self.counts["client_named"] += 1
            return {}
        if not session_key:
            return {}
        sid = self.engine_id(tenant, session_key)
        out = self.adapter.session_fields(sid, body)
        if out:
            key = (tenant, session_key)
            self._tagged[key] = sid
            self._tagged.move_to_end(key)
            while len(self._tagged) > TAGGED_MAX:
                self._tagged.popitem(last=False)
            self.counts["tagged"] += 1
        return out

    # -- the observer's events ----------------------------------------------------------------------
    def on_request(self, tenant: str, session_key: str | None, now: float) -> None:
        if session_key:
            self.closer.on_request(f"{tenant}\x00{session_key}", now)

    def on_response(self, tenant: str, session_key: str | None, finish_reason: str | None, now: float) -> None:
        if session_key:
            tool = finish_reason == "tool_calls"
            self.closer.on_response(f"{tenant}\x00{session_key}", finish_reason, tool, now)

    # -- execution ----------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Start closing the sessions due at `now` (one batch in flight at a time)."""
        if self._task is not None and not self._task.done():
            return
        due = self.closer.due(now, self.max_closes_per_tick)
        if not due:
            return
        self._task = asyncio.get_running_loop().create_task(self._close(due), name="cachescout-sglang-close")

    async def _close(self, due: list[str]) -> int:
        closed = 0
        for track in due:
            tenant, _, key = track.partition("\x00")
            self.closer.closed(track)
            sid = self._tagged.pop((tenant, key), None)
            if sid is None:  # never tagged by us: nothing of ours to close in the engine
                continue
            try:
                ok = await self.adapter.close_session(sid)
            except Exception:  # fail-open: an adapter bug must not stop the tick
                log.debug("close_session raised", exc_info=True)
                ok = False
            closed += ok
            self.counts["closed" if ok else "close_failed"] += 1
        return closed

    async def drain(self) -> None:
        """Wait for the batch of closes in flight (tests, shutdown)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def info(self) -> dict[str, Any]:
        return {**self.counts, "tracked": len(self.closer), "tagged_live": len(self._tagged)}
