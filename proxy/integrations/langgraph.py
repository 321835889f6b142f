"""LangGraph (langchain-core callbacks) → CacheScout hints.

    from proxy.integrations.langgraph import CacheScoutCallback
    hints = CacheScoutCallback("http://127.0.0.1:9000", api_key=key, source="my-graph")
    graph.invoke(state, {"callbacks": [hints], "configurable": {"thread_id": "session-1"}})

What it sends, per LangGraph thread (the session id is the ``thread_id``; send the same id on the
model calls, e.g. ``user=thread_id`` or the ``X-Session-ID`` header, so the proxy can match them):
- ``on_tool_start`` → ``tool_started`` with the expected duration learned from this tool's earlier
  runs (an exponentially weighted mean; none before its first run);
- ``on_tool_end`` / ``on_tool_error`` → ``tool_finished``;
- the end of the top-level graph run → ``session_ended`` (``end_session_on_graph_end=False`` for
  threads that continue across invocations);
- fan-out: wrap the ``Send`` list a conditional edge returns, ``return hints.fanout(sends, config)``,
  to announce the branches before they start.

Fail-open: the hint client has a short timeout and never raises into the graph. Needs the optional
``langgraph`` extra (``pip install cachescout[langgraph]``).
"""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from proxy.integrations.hints_client import HintClient


class CacheScoutCallback(BaseCallbackHandler):
    raise_error = False
    run_inline = True

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        source: str | None = None,
        *,
        client: HintClient | None = None,
        end_session_on_graph_end: bool = True,
        duration_weight: float = 0.3,
    ) -> None:
        self.hints = client or HintClient(base_url, api_key=api_key, source=source)
        self.end_session_on_graph_end = end_session_on_graph_end
        self.duration_weight = duration_weight
        self.expected: dict[str, float] = {}  # tool name -> expected seconds
        self._tools: dict[UUID, tuple[str, str, float]] = {}  # run id -> (session, tool, started)
        self._roots: dict[UUID, str] = {}  # top-level run id -> session

    @staticmethod
    def _session(metadata: dict | None) -> str | None:
        sid = (metadata or {}).get("thread_id")
        return str(sid) if sid else None

    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict | None = None,
        **kw: Any,
    ) -> None:
        if parent_run_id is None:
            sid = self._session(metadata)
            if sid:
                self._roots[run_id] = sid

    def on_chain_end(self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any) -> None:
        sid = self._roots.pop(run_id, None)
        if sid and self.end_session_on_graph_end:
            self.hints.session_ended(sid)

    def on_tool_start(
        self,
        serialized: Any,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict | None = None,
        **kw: Any,
    ) -> None:
        sid = self._session(metadata)
        if not sid:
            return
        name = str((serialized or {}).get("name") or kw.get("name") or "tool")
        self._tools[run_id] = (sid, name, time.monotonic())
        self.hints.tool_started(sid, self.expected.get(name), tool=name)

    def _tool_done(self, run_id: UUID) -> None:
        entry = self._tools.pop(run_id, None)
        if entry is None:
            return
        sid, name, started = entry
        took = time.monotonic() - started
        prev = self.expected.get(name)
        w = self.duration_weight
        self.expected[name] = took if prev is None else (1 - w) * prev + w * took
        self.hints.tool_finished(sid)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kw: Any) -> None:
        self._tool_done(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        self._tool_done(run_id)

    def fanout(self, sends: list, config: dict | None = None, session_id: str | None = None) -> list:
        """Announce a fan-out of ``len(sends)`` branches of this thread; returns ``sends`` unchanged."""
        sid = session_id or ((config or {}).get("configurable") or {}).get("thread_id")
        if sid and len(sends) > 1:
            self.hints.fanout(str(sid), branches=len(sends))
        return sends
