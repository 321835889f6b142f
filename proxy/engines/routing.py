"""The session routing key a warmup repeats, so a router sends it to the replica its session's
requests go to: what vllm-router's ``consistent_hash`` policy reads, in its order, and where it
reads it (a header, or a body field)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# vllm-router's consistent_hash reads these in order (its policies/consistent_hash.rs
# SESSION_HEADER_NAMES) and hashes "header:<name>:<value>"; the per-request ids after them
# (x-request-id, x-correlation-id, x-trace-id) change with every call, so a warmup cannot repeat them
ROUTING_HEADERS = ("x-session-id", "x-user-id", "x-tenant-id")
# ... then these body fields ("session:<v>" / "user:<v>"), when no header carried a key
ROUTING_BODY_FIELDS = ("session_params.session_id", "user", "session_id", "user_id")


def routing_of(prompt: object) -> tuple[str, str] | None:
    """The routing key a kept session context carries (`runtime.payload.BodyPayload.routing`)."""
    routing = getattr(prompt, "routing", None)
    if isinstance(routing, tuple) and len(routing) == 2 and all(isinstance(x, str) for x in routing):
        return (routing[0], routing[1])
    return None


def routing_key(headers: Mapping[str, str], body: object) -> tuple[str, str] | None:
    """What vllm-router's consistent_hash would route this request by, when a later warmup can
    repeat it: the first session header present, else the first body field (ROUTING_BODY_FIELDS).
    Returned as (name, value): a header name, or a body field path. None: nothing repeatable."""
    for name in ROUTING_HEADERS:
        value = headers.get(name)
        if isinstance(value, str) and value:
            return name, value[:256]
    if isinstance(body, Mapping):
        params = body.get("session_params")
        if isinstance(params, Mapping):
            sid = params.get("session_id")
            if isinstance(sid, str) and sid:
                return "session_params.session_id", sid[:256]
        for name in ROUTING_BODY_FIELDS[1:]:
            value = body.get(name)
            if isinstance(value, str) and value:
                return name, value[:256]
    return None


def apply_routing(routing: tuple[str, str] | None, headers: dict[str, str], body: dict[str, Any]) -> None:
    """Make a warmup carry the session's routing key exactly where its requests carry it (the
    router hashes the source with the value, so X-User-ID: u and user=u land differently)."""
    if routing is None:
        return
    name, value = routing
    if name in ROUTING_HEADERS:
        headers[name] = value
    elif name == "session_params.session_id":
        body["session_params"] = {"session_id": value}
    elif name in ROUTING_BODY_FIELDS:
        body[name] = value
