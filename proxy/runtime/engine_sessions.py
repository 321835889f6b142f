"""What the forwarded request tells the engine beyond the client's bytes: the proxy's session id and
the lane's priority, as headers (the live observer's `forward_headers`, `contracts.HeaderAdder`).

Why headers: vLLM 0.32 reads a session id from `X-Session-ID` (and echoes it on its KV events'
`BlockStored.session_id`) and a priority from `X-Vllm-Priority` (overriding the body's field);
vllm-router's `consistent_hash` keys replicas on `X-Session-ID`. A header carries what the proxy
knows without touching the body, so a client's bytes reach the engine exactly as sent.

- Session: a client request that carries no session id vLLM would read (no `X-Session-ID` header,
  no body `session_id`, no `vllm_xargs.session_id`) gets the id of the conversation the proxy infers
  it continues (`ScoutPolicy.peek_session`, the tracker's own lookup without side effects), or a
  fresh one for a conversation that starts here; the id is bound to the conversation once the
  request is observed (`SessionTagBook.bind`). An id is opaque and keyed with the tenant's salt
  (`core/session_tags.engine_session_id`). The view this builds is the one the deferred
  observation reuses, so the header moves that work before the forward rather than adding to it.
  Bodies the forwarder did not parse (over `policy_inline_parse_bytes`), requests the policy skips
  and any failure are forwarded without the header (fail-open).
- Actions: a planned action for a conversation with an id carries the id as its routing key, so a
  warm behind `consistent_hash` lands on the replica the conversation's next request will.
- Priority: with the session lane on and an engine that reads the header (`CAP_PRIORITY_HEADER`),
  `rewrite_body` leaves the body alone and the lane's priority goes out here as `X-Vllm-Priority`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from proxy.core.action_payload import ActionPayload, KeptPrompt
from proxy.core.fingerprint import view_from_openai
from proxy.core.session_tags import SessionTagBook
from proxy.engines.routing import routing_of
from proxy.runtime.request_state import request_state

if TYPE_CHECKING:
    from proxy.contracts import RequestContext
    from proxy.core.actions import Action
    from proxy.core.policy import ScoutPolicy
    from proxy.runtime.request_state import RequestState

SESSION_HEADER = "x-session-id"
PRIORITY_HEADER = "x-vllm-priority"
LANE_PRIORITY_KEY = "lane_priority"  # ctx.state: the lane's priority, sent as a header
TAGGED_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages")
WARMUP_HEADER = "x-cachescout-warmup"


def client_session_id(headers: Mapping[str, str], body: object) -> bool:
    """Whether the request carries a session id vLLM 0.32 reads: the `X-Session-ID` header, the
    body's `session_id` or `vllm_xargs.session_id` (any non-empty value: the proxy never replaces it)."""
    if headers.get(SESSION_HEADER):
        return True
    if not isinstance(body, Mapping):
        return False
    if body.get("session_id"):
        return True
    xargs = body.get("vllm_xargs")
    return isinstance(xargs, Mapping) and bool(xargs.get("session_id"))


class RoutedPrompt(KeptPrompt):
    """An action's prompt with the routing key of the conversation it was planned for."""

    __slots__ = ("inner", "routing")

    def __init__(self, inner: object, routing: tuple[str, str]) -> None:
        self.inner = inner
        self.routing = routing

    @property
    def nbytes(self) -> int:
        return int(getattr(self.inner, "nbytes", 0) or 0) + len(self.routing[1])

    def to_warm_dict(self) -> Mapping[str, object] | None:
        inner = self.inner
        if isinstance(inner, KeptPrompt):
            return inner.to_warm_dict()
        return inner if isinstance(inner, Mapping) else None


class EngineSessions:
    """`forward_headers` and the session-id bookkeeping of `LivePolicyObserver` (a mixin)."""

    policy: ScoutPolicy
    block_chars: int
    chars_per_token: float
    counts: dict[str, int]

    def _init_engine_sessions(self) -> None:
        self.session_header = True  # settings.session_header (LiveRuntime sets it)
        self.priority_by_header: Callable[[], bool] = lambda: False  # the adapter reads X-Vllm-Priority
        self.tags = SessionTagBook(os.urandom(8).hex())

    def forward_headers(self, ctx: RequestContext) -> list[tuple[str, str]] | None:
        out: list[tuple[str, str]] = []
        prio = ctx.state.get(LANE_PRIORITY_KEY)
        if isinstance(prio, int) and not ctx.headers.get(PRIORITY_HEADER):
            out.append((PRIORITY_HEADER, str(prio)))
        if self.session_header:
            tag = self._session_tag(ctx)
            if tag is not None:
                out.append((SESSION_HEADER, tag))
        return out or None

    def _session_tag(self, ctx: RequestContext) -> str | None:
        if ctx.method != "POST" or ctx.path not in TAGGED_PATHS or not isinstance(ctx.json, dict):
            return None
        if ctx.headers.get(WARMUP_HEADER) or client_session_id(ctx.headers, ctx.json):
            return None
        st = request_state(ctx)
        if st is None or st.skip or st.parsing:
            return None
        view = st.view
        if view is None:  # built now; the deferred observation reuses it
            view = st.view = view_from_openai(
                ctx.path, ctx.json, ctx.headers, block_chars=self.block_chars, chars_per_token=self.chars_per_token
            )
        if view is None or view.is_warmup or not view.block_hashes:
            return None
        tag = self.tags.tag_of(self.policy.peek_session(view))
        if tag is None:
            tag = self.tags.mint(view.tenant)
        st.engine_tag = tag
        self.counts["session_tagged"] = self.counts.get("session_tagged", 0) + 1
        return tag

    def _bind_tag(self, st: RequestState, tenant: str, conversation: str | None) -> tuple[str, str] | None:
        """After observe: bind the id this request went out with to its conversation; returns the
        routing key the conversation's kept context carries (its actions repeat it)."""
        tag = st.engine_tag
        if tag is None or not conversation:
            return None
        return (SESSION_HEADER, self.tags.bind((tenant, conversation), tag))

    def route_actions(self, actions: Sequence[Action]) -> list[Action]:
        """Give each action planned for a conversation with an engine session id that id as its
        routing key (an action whose prompt already routes, e.g. a kept context, keeps its own)."""
        out = list(actions)
        if not self.session_header or not len(self.tags):
            return out
        for i, a in enumerate(out):
            if a.session is None or routing_of(a.payload.prompt) is not None:
                continue
            tag = self.tags.tag_of(a.session)
            if tag is not None:
                prompt = RoutedPrompt(a.payload.prompt, (SESSION_HEADER, tag))
                out[i] = replace(a, payload=ActionPayload(prompt, a.payload.assistant))
        return out
