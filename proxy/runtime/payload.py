"""A request's context kept compactly: the original body bytes, parsed again only when needed.

Why: a session (and a parked fan-out parent) keeps its latest prompt so that a tool_resume or a
fan-out touch can rebuild it. Kept as the parsed JSON it cost several times the body (a dict and a
str per message, ~2.2x the prompt measured with the hash chain); kept as the body it costs the body
once — the same bytes object the forwarder already holds, not a copy. The rare action that needs the
prompt (`engines.base.warm_spec`, through `ActionPayload.request`) calls `to_warm_dict`, which
rebuilds exactly the dict the canonical view would have carried (same function, same body).
"""

from __future__ import annotations

from collections.abc import Mapping

from proxy.core.action_payload import KeptPrompt
from proxy.core.fingerprint import view_from_openai


class BodyPayload(KeptPrompt):
    """The context payload of one chat/completions request, as its body bytes, and the routing key
    its request carried (`engines.routing.routing_key`: an action for this session carries it too, so
    that behind vllm-router's consistent_hash it lands on the replica the session's next call will)."""

    __slots__ = ("body", "path", "routing")

    def __init__(self, path: str, body: bytes, routing: tuple[str, str] | None = None) -> None:
        self.path = path
        self.body = body
        self.routing = routing

    @property
    def nbytes(self) -> int:
        """Bytes held (the core's session byte budget reads this)."""
        return len(self.body) + (len(self.routing[1]) if self.routing else 0)

    def to_warm_dict(self) -> Mapping[str, object] | None:
        view = view_from_openai(self.path, self.body)
        payload = view.context_payload if view is not None else None
        return payload if isinstance(payload, Mapping) else None
