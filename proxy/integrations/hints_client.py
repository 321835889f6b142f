"""`HintClient`: a tiny, fail-open sender of runtime hints to a CacheScout proxy.

Why fail-open: a hint is an optimisation. A proxy that is down, slow or refusing must never slow
the agent runtime down or raise into it, so every send has a short timeout and errors are counted,
not raised. Usable from any framework::

    hints = HintClient("http://127.0.0.1:9000", api_key=os.environ.get("OPENAI_API_KEY"), source="planner")
    hints.tool_started("session-1", expected_s=0.8)
    hints.tool_finished("session-1")
    hints.fanout("session-1", branches=4)
    hints.next_agent("session-1", "coder", probability=0.8)
    hints.session_ended("session-1")

Use the same API key (and `cache_salt`, if the model calls carry one) as the model calls: the proxy
accepts hints only from a credential the engine accepted, and applies them only to that
credential's sessions in that tenant (docs/hints.md).
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

log = logging.getLogger("cachescout.hints_client")
HINTS_PATH = "/v1/cachescout/hints"


class HintClient:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        source: str | None = None,
        timeout_s: float = 0.5,
        client: httpx.Client | None = None,
        cache_salt: str | None = None,
    ) -> None:
        self.url = base_url.rstrip("/").removesuffix("/v1") + HINTS_PATH
        self.headers = {"content-type": "application/json"}
        if api_key:
            self.headers["authorization"] = f"Bearer {api_key}"
        if source:
            self.headers["x-cachescout-source"] = source
        self.client = client or httpx.Client(timeout=timeout_s)
        self.cache_salt = cache_salt  # the tenant the model calls name (hints are scoped to it)
        self.sent = 0
        self.failed = 0
        self.last: Any = None

    def send(self, *hints: dict) -> bool:
        """POST a batch; True when the proxy accepted the request (each hint has its own outcome)."""
        try:
            body: dict[str, Any] = {"hints": list(hints)}
            if self.cache_salt:
                body["cache_salt"] = self.cache_salt
            r = self.client.post(self.url, json=body, headers=self.headers)
            self.last = r.json()
            ok = r.status_code == 200
        except (httpx.HTTPError, ValueError) as exc:
            log.debug("hint not delivered: %s", exc)
            ok = False
        if ok:
            self.sent += len(hints)
        else:
            self.failed += len(hints)
        return ok

    def tool_started(self, session_id: str, expected_s: float | None = None, tool: str | None = None) -> bool:
        h: dict[str, Any] = {"type": "tool_started", "session_id": session_id}
        if expected_s is not None:
            h["expected_duration_s"] = float(expected_s)
        if tool:
            h["tool"] = tool
        return self.send(h)

    def tool_finished(self, session_id: str) -> bool:
        return self.send({"type": "tool_finished", "session_id": session_id})

    def fanout(self, session_id: str, branches: int = 0, branch_ids: list[str] | None = None) -> bool:
        h: dict[str, Any] = {"type": "fanout", "session_id": session_id, "branches": int(branches)}
        if branch_ids:
            h["branch_ids"] = list(branch_ids)
        return self.send(h)

    def next_agent(self, session_id: str, agent: str, probability: float = 1.0) -> bool:
        return self.send(
            {"type": "next_agent", "session_id": session_id, "agent": agent, "probability": float(probability)}
        )

    def session_ended(self, session_id: str) -> bool:
        return self.send({"type": "session_ended", "session_id": session_id})

    def close(self) -> None:
        self.client.close()
