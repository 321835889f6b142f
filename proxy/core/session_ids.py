"""The explicit id a request carries, if any: its headers, vLLM's ``agentic_context``, the
Responses API ``conversation``, ``metadata.session_id``, ``prompt_cache_key`` or ``user``.

Why apart from fingerprint.py: which id a harness sends changes with the harnesses (a list of
headers and body fields), the canonical view does not. The id names a *run* (or less), never a
conversation: sessions are split by continuity (sessions.py), agents recur over lineage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SESSION_HEADER = "x-session-id"

__all__ = ["SESSION_HEADER", "SESSION_HEADERS", "_get_header", "_session_id"]


def _get_header(headers: Mapping[str, str] | None, name: str) -> str | None:
    if not headers:
        return None
    v = headers.get(name)
    if v is None:
        for k, val in headers.items():
            if isinstance(k, str) and k.lower() == name:
                return val
    return v


# Session headers agent harnesses send, most specific first: ours / routers' X-Session-ID, Claude
# Code's X-Claude-Code-Session-Id, Codex's session-id, OpenCode's x-session-affinity (OpenCode also
# sends X-Session-Id; a subagent's x-parent-session-id names its parent's run).
SESSION_HEADERS = (
    SESSION_HEADER,
    "x-claude-code-session-id",
    "session-id",
    "x-session-affinity",
    "x-parent-session-id",
)
_XARGS_IDS = ("program_id", "session_id", "task_id")  # vllm_xargs.agentic_context (vllm router #286)


def _str_id(v: Any) -> str | None:
    if isinstance(v, Mapping):
        v = v.get("id")  # Responses API `conversation`: a string or {"id": ...}
    return v if isinstance(v, str) and v else None


def _session_id(body: Mapping[str, Any], headers: Mapping[str, str] | None) -> str | None:
    """The explicit id a request carries, if any. It names a *run* (or less: a constant `user` or
    prompt_cache_key for a whole app), never a conversation: sessions are split by continuity and
    agents recur over lineage, whatever this says (``sessions.py``, ``prefix_index.py``)."""
    for name in SESSION_HEADERS:
        sid = _str_id(_get_header(headers, name))
        if sid:
            return sid
    xargs = body.get("vllm_xargs")
    ctx = xargs.get("agentic_context") if isinstance(xargs, Mapping) else None
    if isinstance(ctx, Mapping):
        for k in _XARGS_IDS:
            sid = _str_id(ctx.get(k))
            if sid:
                return sid
    meta = body.get("metadata")
    for sid in (
        _str_id(body.get("conversation")),
        _str_id(meta.get("session_id")) if isinstance(meta, Mapping) else None,
        _str_id(body.get("prompt_cache_key")),
        _str_id(body.get("user")),
    ):
        if sid:
            return sid
    return None
