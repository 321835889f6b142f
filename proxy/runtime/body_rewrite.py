"""Opt-in engine hints on forwarded requests: the live observer's `rewrite_body` (`BodyRewriter`).

Why apart from the observer's hooks: by default the forwarder relays the client's bytes exactly, and
this is the one place that may change them — only when the operator enabled `kv_hints` /
`request_priority` (the adapter's fields for the request's agent, from the survival the planner last
gave its anchor), `hints_strip_fields` (the body without the engines' hint-proposal fields) or the
session lane (`session_priority`: a `priority` on requests that carry none, `session_lane.py`; on an
engine that reads `X-Vllm-Priority` the lane's priority goes in that header instead and the body is
not rewritten for it, `engine_sessions.py`). A
mixin of `LivePolicyObserver`, so it reads the observer's own state.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from proxy.core.fingerprint import view_from_openai
from proxy.runtime.engine_sessions import LANE_PRIORITY_KEY, PRIORITY_HEADER
from proxy.runtime.hint_inputs import strip_fields
from proxy.runtime.request_state import request_state

if TYPE_CHECKING:
    from proxy.contracts import RequestContext
    from proxy.core.policy import ScoutPolicy
    from proxy.core.view import RequestView
    from proxy.runtime.offload import ObserveLimits
    from proxy.runtime.session_lane import SessionLane
    from proxy.runtime.sglang_sessions import SessionCacheDriver
    from proxy.runtime.switchback import SelfEvaluation

HINT_TTL_S = 60.0  # an anchor's action priority is used for forwarded requests this long
LANE_PATHS = ("/v1/chat/completions", "/v1/completions")  # vLLM/SGLang read `priority` on these
LANE_LOOKBACK = 256  # blocks walked back to find the session a request continues
WARMUP_HEADER = "x-cachescout-warmup"
# What a body must contain for it to carry a strippable field (a fast scan before any parse).
STRIP_MARKERS = (b"agent_hint", b"nvext")


def parse_if_hinted(body: bytes | bytearray) -> object:
    """The parsed body when its bytes mention a hint-proposal field, else None (no parse)."""
    if not any(m in body for m in STRIP_MARKERS):
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


class BodyRewriting:
    """`rewrite_body` for `LivePolicyObserver` (which owns these attributes)."""

    policy: ScoutPolicy
    clock: Callable[[], float]
    block_chars: int
    chars_per_token: float
    counts: dict[str, int]
    rewrite_enabled: bool
    strip_hint_fields: bool
    limits: ObserveLimits
    selfeval: SelfEvaluation | None
    extras_for: Callable[[float | None], dict[str, object]]
    _anchor_priority: OrderedDict[str, tuple[int, float]]  # anchor -> (priority, when), see on_action_result
    session_lane: SessionLane | None  # opt-in session lane (LiveRuntime sets it)
    session_cache: SessionCacheDriver | None  # opt-in SGLang session cache (LiveRuntime sets it)
    lane_active: Callable[[], bool]  # the adapter reports a priority policy now
    engine_priority: Callable[[int], int]  # a lane rank in the engine's sign convention
    priority_by_header: Callable[[], bool]  # the engine reads X-Vllm-Priority (engine_sessions.py)

    def rewrite_body(self, ctx: RequestContext) -> bytes | None:
        """The rewrites below, plus (opt-in `sglang_sessions`) SGLang's `session_id` for the session
        the request continues (`sglang_sessions.py`). None: forward the original bytes."""
        out = self._lane_body(ctx)
        cache = self.session_cache
        if cache is None:
            return out
        extra = self._sglang_session_fields(ctx, cache)
        if not extra:
            return out
        body = json.loads(out) if out is not None else ctx.json
        if not isinstance(body, dict):
            return out
        self.counts["session_tagged"] = self.counts.get("session_tagged", 0) + 1
        return json.dumps({**body, **extra}, separators=(",", ":"), ensure_ascii=False).encode()

    def _sglang_session_fields(self, ctx: RequestContext, cache: SessionCacheDriver) -> dict[str, object]:
        """SGLang's `session_id` field for a generation request, from the session it continues (the
        core's continuation index, as the session lane finds it); {} for a new session's first call."""
        body = ctx.json
        if ctx.method != "POST" or ctx.path not in LANE_PATHS or not isinstance(body, dict):
            return {}
        if ctx.headers.get(WARMUP_HEADER):
            return {}
        st = request_state(ctx)
        if st is None or st.skip or st.parsing:
            return {}
        view = st.view or view_from_openai(
            ctx.path, body, ctx.headers, block_chars=self.block_chars, chars_per_token=self.chars_per_token
        )
        st.view = view
        if view is None or view.is_warmup:
            return {}
        key = self._lane_session(view)
        if key is None:
            return {}
        return cache.fields(key[0], key[1], body)

    def _lane_body(self, ctx: RequestContext) -> bytes | None:
        """The hint rewrite below, plus the opt-in session lane's `priority` (`session_lane.py`) when
        the engine schedules by priority and the client set none. None: forward the original bytes."""
        lane = self.session_lane
        if lane is None or not self.lane_active():
            return self._hints_body(ctx)
        extra = self._lane_priority(ctx, lane)
        hinted = self._hints_body(ctx)
        if extra is None:
            return hinted
        if self.priority_by_header():  # the engine reads X-Vllm-Priority: the body stays as sent
            ctx.state[LANE_PRIORITY_KEY] = extra["priority"]
            self.counts["session_priority_header"] = self.counts.get("session_priority_header", 0) + 1
            return hinted
        body = json.loads(hinted) if hinted is not None else ctx.json
        if not isinstance(body, dict) or "priority" in body:
            return hinted  # an engine hint set one already (never with the lane active)
        self.counts["session_priority"] = self.counts.get("session_priority", 0) + 1
        return json.dumps({**body, **extra}, separators=(",", ":"), ensure_ascii=False).encode()

    def _lane_priority(self, ctx: RequestContext, lane: SessionLane) -> dict[str, object] | None:
        """{"priority": p} for a generation request without one; its session from the explicit id or
        the core's own continuation index (the deepest earlier prompt this one extends)."""
        body = ctx.json
        if ctx.method != "POST" or ctx.path not in LANE_PATHS or not isinstance(body, dict):
            return None
        if "priority" in body or ctx.headers.get(PRIORITY_HEADER):
            lane.counts["kept_client_priority"] += 1
            return None  # a client's own priority (body or header) always passes unchanged
        if ctx.headers.get(WARMUP_HEADER):
            return None
        st = request_state(ctx)
        key: tuple[str, str] | None = None
        if st is not None and not st.skip and not st.parsing:
            view = st.view or view_from_openai(
                ctx.path, body, ctx.headers, block_chars=self.block_chars, chars_per_token=self.chars_per_token
            )
            st.view = view
            if view is not None and not view.is_warmup:
                key = self._lane_session(view)
        return {"priority": self.engine_priority(lane.rank(key, self.clock()))}

    def _lane_session(self, view: RequestView) -> tuple[str, str] | None:
        if view.session_id:
            return (view.tenant, view.session_id)
        tracker = self.policy.sessions
        index = getattr(tracker, "_index", None)  # the core's continuation index: last hash -> session key
        if not isinstance(index, dict):
            return None
        hashes = view.block_hashes
        for h in reversed(hashes[-LANE_LOOKBACK:]):
            key = index.get(h)
            if key is not None and key[0] == view.tenant and key in tracker.sessions:
                return (str(key[0]), str(key[1]))
        return None

    def _hints_body(self, ctx: RequestContext) -> bytes | None:
        """Opt-in: the forwarded body plus the adapter's engine hints for this request's agent
        (`priority` from the survival the planner last gave its anchor, or a `kv_hints` envelope).
        None (forward the original bytes) when off, unparsed, unknown agent or nothing to add. Builds
        the view now (the deferred observation reuses it), so enabling hints costs ~0.3 ms inline."""
        if not self.rewrite_enabled or (self.selfeval is not None and not self.selfeval.active()):
            # off, or observe-only (no engine hints from the policy): only hint-field stripping remains
            return self._stripped(ctx) if self.strip_hint_fields else None
        st = request_state(ctx)
        if st is None or st.skip or st.parsing or not isinstance(ctx.json, dict):
            return self._stripped(ctx) if self.strip_hint_fields else None
        view = view_from_openai(
            ctx.path, ctx.json, ctx.headers, block_chars=self.block_chars, chars_per_token=self.chars_per_token
        )
        st.view = view
        if view is None or view.is_warmup or not view.block_hashes:
            return None
        agent = self.policy.agents.lookup(view)
        if agent is None:
            return None
        hit = self._anchor_priority.get(agent.agent_id)
        now = self.clock()
        survival = hit[0] / 100.0 if hit is not None and now - hit[1] < HINT_TTL_S else None
        extras = self.extras_for(survival)
        if not extras:
            return self._stripped(ctx) if self.strip_hint_fields else None
        self.counts["rewritten"] += 1
        body = (strip_fields(ctx.json) if self.strip_hint_fields else None) or ctx.json
        return json.dumps({**body, **extras}, separators=(",", ":"), ensure_ascii=False).encode()

    def _stripped(self, ctx: RequestContext) -> bytes | None:
        """Opt-in (`hints_strip_fields`): the body without the engines' hint-proposal fields, for
        engines that reject unknown fields; None (original bytes) when it carries none. Every body
        the policy reads (up to `policy_max_body_bytes`) is stripped: the forwarder parsed those up
        to `policy_inline_parse_bytes`; larger ones are scanned for the field names first and
        parsed here only when one occurs (~12 ms per MiB, on the loop; opt-in). Bodies over
        `policy_max_body_bytes` are never parsed by the proxy (bounded CPU and memory per request),
        so they are forwarded byte for byte, fields and all (docs/hardening.md)."""
        if ctx.method != "POST":
            return None
        data = ctx.json
        if data is None and isinstance(ctx.body, bytes | bytearray):
            if len(ctx.body) > self.limits.max_body_bytes:
                return None
            data = parse_if_hinted(ctx.body)
        if not isinstance(data, dict):
            return None
        if ctx.json is None:
            ctx.json = data  # parsed once: the deferred observation reads its hint fields from it
        body = strip_fields(data)
        if body is None:
            return None
        self.counts["stripped"] = self.counts.get("stripped", 0) + 1
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
