"""The RequestObserver that feeds the policy core from live traffic, and plans from it.

Why the work is deferred: the forwarder calls these hooks synchronously before it sends the
request upstream, so `on_request` only bookkeeps (microseconds) and schedules the real work —
building the canonical view (JSON canonicalisation + xxh3 over the prompt), `observe_request`,
`plan` — with `loop.call_soon`, which runs once the forwarder has yielded to the network. Responses
are read from the side by a `ResponseTap`; `on_response_end` again defers. FIFO scheduling keeps
request before response for each id.

What is never learned from: the proxy's own warmups (they go straight to the adapter, never through
the forwarder), client requests carrying the warmup header or `max_tokens <= 1` (the core's view
marks them), and requests the engine did not accept: `observe_request` waits until the response
status is known and runs only for a 2xx (a client with a wrong API key must not be able to make the
proxy warm its text with the proxy's own credentials). Optionally (`policy_client_auth_sha256`)
only clients whose Authorization / x-api-key header hashes to an allowed value drive the policy.
Bodies over `policy_max_body_bytes` are not read by the policy; bodies over
`policy_inline_parse_bytes` are parsed and viewed on a worker thread (`runtime/offload.py`); the
session context is kept as the body bytes (`runtime/payload.py`), not as parsed JSON.

What else the observer does lives beside it, as mixins on the same state: the opt-in body rewrite
for engine hints (`body_rewrite.py`), and usage, conversion and yield accounting plus the memory
gauges (`live_accounting.py`), and the engine load the planner weighs actions against
(`live_load.py`); its per-request state is `request_state.RequestState`. It talks to
the executor through `contracts.ActionSink` (queue actions, how many are on the wire).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from proxy.contracts import ActionSink, RequestContext
from proxy.core.economics import RunningSet
from proxy.core.fingerprint import view_from_openai
from proxy.core.policy import ScoutPolicy
from proxy.core.view import RequestView, ResponseOutcome
from proxy.core.yield_book import YieldBook
from proxy.engines.routing import routing_key
from proxy.observability.metrics import ProxyMetrics
from proxy.runtime.body_rewrite import BodyRewriting, parse_if_hinted
from proxy.runtime.engine_sessions import EngineSessions
from proxy.runtime.hint_inputs import request_hints
from proxy.runtime.live_accounting import UsageAccounting
from proxy.runtime.live_load import LoadView
from proxy.runtime.offload import ObserveLimits, ParseOffload, view_from_openai_bytes
from proxy.runtime.payload import BodyPayload
from proxy.runtime.request_state import STATE_KEY, RequestState, request_state
from proxy.runtime.response_tap import ResponseTap, TapBudget

if TYPE_CHECKING:  # set by LiveRuntime after construction; imported for their types only
    from proxy.runtime.hint_inputs import HintService
    from proxy.runtime.prefill import PrefillRate
    from proxy.runtime.session_lane import SessionLane
    from proxy.runtime.sglang_sessions import SessionCacheDriver
    from proxy.runtime.switchback import SelfEvaluation

log = logging.getLogger("cachescout.live_policy")

OBSERVED_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages")
WARMUP_HEADER = "x-cachescout-warmup"
STALE_INFLIGHT_S = 900.0  # a request whose hooks never ended stops counting as in flight after this
AUTH_HEADERS = ("authorization", "x-api-key")
# the observer's counters (/debug/state -> observer), in report order
COUNTS = (
    "requests",
    "observed",
    "skipped",
    "warmup_requests",
    "responses",
    "errors",
    "prompt_tokens",
    "cached_tokens",
    "converted_tokens",
    "deferred_observe_us",
    "rewritten",
    "rejected",
    "not_allowed",
    "body_too_large",
    "offloaded",
    "offload_full",
    "parse_budget",
)


class LivePolicyObserver(BodyRewriting, EngineSessions, UsageAccounting, LoadView):
    """Implements `contracts.RequestObserver` (and `BodyRewriter`, `HeaderAdder`) on top of a ScoutPolicy."""

    def __init__(
        self,
        policy: ScoutPolicy,
        metrics: ProxyMetrics | None,
        clock: Callable[[], float],
        *,
        block_chars: int = 64,
        chars_per_token: float = 4.0,
        defer: bool = True,
    ) -> None:
        self.policy = policy
        self.metrics = metrics
        self.clock = clock
        self.block_chars = block_chars
        self.chars_per_token = chars_per_token
        self.defer = defer
        self.executor: ActionSink | None = None  # set by LiveRuntime (the ActionExecutor)
        self.engine_waiting: Callable[[], int] = lambda: 0
        self.engine_external: Callable[[], int] = lambda: 0  # engine requests not this proxy's (scraped)
        self.lane_active: Callable[[], bool] = lambda: False  # slack lane: the adapter's priority policy
        self.role_is_first_output = False  # the adapter's role_chunk_is_first_output (response_tap.py)
        self.engine_priority: Callable[[int], int] = lambda rank: rank  # session-lane rank -> engine priority
        self.session_lane: SessionLane | None = None  # opt-in session lane (LiveRuntime sets it)
        self.session_cache: SessionCacheDriver | None = None  # opt-in SGLang session cache (sglang_sessions)
        self._inflight: dict[int, float] = {}
        self._states: dict[int, RequestState] = {}  # in flight: first token seen yet? (slack)
        self.running = RunningSet()  # distinct view tokens of the requests in flight
        self.utilisation = 0.0  # engine prefill busy share (LiveRuntime, scraped)
        self.deferred = 0  # call_soon work scheduled but not yet run
        self.prefill: PrefillRate | None = None  # PrefillRate: streamed requests' computed tokens / TTFT
        self.token_ratio: float | None = None  # engine tokens per estimated view token (EWMA)
        # Opt-in engine hints on forwarded requests (kv_hints / request_priority): LiveRuntime sets
        # `extras_for` to the adapter's request_extras and switches `rewrite_enabled` on.
        self.rewrite_enabled = False
        self.extras_for: Callable[[float | None], dict[str, object]] = lambda survival: {}
        self._anchor_priority: OrderedDict[str, tuple[int, float]] = OrderedDict()
        # Runtime hints (proxy.runtime.hint_inputs.HintService), set by LiveRuntime; strip_hint_fields:
        # the operator asked to forward bodies without the engines' proposal fields.
        self.hints: HintService | None = None
        self.strip_hint_fields = False
        self.selfeval: SelfEvaluation | None = None  # runtime.switchback.SelfEvaluation (LiveRuntime sets it)
        self._last_request_at = float("-inf")  # when the latest client request started
        self._last_response_at = float("-inf")  # ... and when the latest one ended
        # (tenant, last hash of an executed action's prefix) -> (engine prompt tokens, already cached,
        # remaining LRU life in shadow tokens, shadow inserted tokens then): the yield counterfactual
        self._yield_book = YieldBook()  # executed actions' yield counterfactuals (core/yield_book.py)
        self.counts = dict.fromkeys(COUNTS, 0)
        self.limits = ObserveLimits()
        self.offload = ParseOffload(self.limits.offload_queue)
        self.tap_budget = TapBudget()
        self.allowed_auth: frozenset[str] = frozenset()  # sha256 hex of allowed auth headers; empty = all
        self._drops_seen: dict[str, int] = {}
        self._skips_seen: dict[tuple[str, str], int] = {}
        self._init_engine_sessions()  # session ids and priority headers (engine_sessions.py)

    def on_request(self, ctx: RequestContext) -> None:
        self._inflight[ctx.request_id] = ctx.started
        self._last_request_at = ctx.started
        st = RequestState()
        self._states[ctx.request_id] = st
        st.alone = len(self._inflight) == 1 and (self.executor is None or not self.executor.sending)
        ctx.state[STATE_KEY] = st
        self.counts["requests"] += 1
        if ctx.path not in OBSERVED_PATHS or ctx.method != "POST":
            st.skip = True
            return
        if self.allowed_auth and not self._allowed(ctx.headers):
            self._skip(st, "not_allowed")
            return
        size = ctx.body_size if ctx.body_size >= 0 else len(ctx.body)
        if size > self.limits.max_body_bytes:
            self._skip(st, "body_too_large")
            return
        if ctx.headers.get(WARMUP_HEADER):
            self.counts["warmup_requests"] += 1
        if isinstance(ctx.json, dict):
            self._later(self._build_view, ctx, st)
        elif ctx.json is None and size > self.limits.inline_parse_bytes and ctx.body[:1] in b"{ \t\r\n":
            if not self.offload.admit(size):  # the worker's time budget (runtime/offload.py)
                self._skip(st, "parse_budget")
                return
            st.parsing = True  # the forwarder left it unparsed: too large for the loop
            args = (ctx.path, ctx.body, ctx.headers, self.block_chars, self.chars_per_token)
            if self.offload.submit(view_from_openai_bytes, args, lambda f: self._view_ready(ctx, st, f), size):
                self.counts["offloaded"] += 1
            else:
                st.parsing = False
                self._skip(st, "offload_full")
        else:
            st.skip = True

    def _allowed(self, headers: Mapping[str, str]) -> bool:
        for name in AUTH_HEADERS:
            value = headers.get(name)
            if value and hashlib.sha256(value.encode("latin-1")).hexdigest() in self.allowed_auth:
                return True
        return False

    def _skip(self, st: RequestState, reason: str) -> None:
        st.skip = True
        self.counts[reason] += 1
        if self.metrics is not None:
            self.metrics.policy_skipped_total.labels(reason).inc()

    def on_response_start(self, ctx: RequestContext, status: int, headers: Mapping[str, str], now: float) -> None:
        st = request_state(ctx)
        if st is None or st.skip:
            return
        st.status = status
        if 200 <= status < 300:
            st.accepted = True
            if self.hints is not None:  # a credential the engine accepts may send hints (docs/hints.md)
                self.hints.credential_seen(ctx.headers, now)
            if status == 200:
                st.tap = ResponseTap(
                    "text/event-stream" in headers.get("content-type", ""),
                    self.tap_budget,
                    role_is_first_output=self.role_is_first_output,
                )
            self._later(self._maybe_observe, ctx, st)
        else:
            self._skip(st, "rejected")  # the engine refused it (auth, validation, overload): learn nothing

    def on_response_chunk(self, ctx: RequestContext, chunk: bytes, now: float) -> None:
        st = request_state(ctx)
        if st is not None and st.tap is not None:
            st.tap.feed(chunk, now)

    def on_response_end(self, ctx: RequestContext, error: str | None, now: float) -> None:
        if self._inflight.pop(ctx.request_id, None) is not None:
            self._last_response_at = now
        self._states.pop(ctx.request_id, None)
        st = request_state(ctx)
        if st is None:
            return
        if st.skip:
            if st.tap is not None:
                st.tap.close()
            return
        st.end = (error, now)
        self._later(self._end_response, ctx, st)

    # -- deferred work ------------------------------------------------------------------------------
    def _later(self, fn: Callable[..., object], *args: object) -> None:
        if self.defer:
            try:
                asyncio.get_running_loop().call_soon(self._deferred_run, fn, *args)
                self.deferred += 1
                return
            except RuntimeError:
                pass
        self._guard(fn, *args)

    def _deferred_run(self, fn: Callable[..., object], *args: object) -> None:
        self.deferred -= 1
        self._guard(fn, *args)

    @property
    def settled(self) -> bool:
        """No client request in flight and every response observed (counters are final)."""
        return not self._inflight and self.deferred == 0 and self.offload.pending == 0

    def _guard(self, fn: Callable[..., object], *args: object) -> None:
        try:
            fn(*args)
        except Exception:
            self.counts["errors"] += 1
            if self.metrics is not None:
                self.metrics.policy_errors_total.inc()
            log.debug("policy step %r failed", fn, exc_info=True)
            if self.counts["errors"] == 1:
                log.exception("policy step failed (counted in cachescout_policy_errors_total)")

    def _build_view(self, ctx: RequestContext, st: RequestState) -> None:
        if st.view is None:  # (rewrite_body may have built it already)
            st.view = view_from_openai(
                ctx.path, ctx.json, ctx.headers, block_chars=self.block_chars, chars_per_token=self.chars_per_token
            )
        if st.view is None:
            st.skip = True
            self.counts["skipped"] += 1
            return
        self._maybe_observe(ctx, st)

    def _view_ready(self, ctx: RequestContext, st: RequestState, fut: asyncio.Future[RequestView | None]) -> None:
        """The worker built (or failed to build) a large body's view; back on the loop."""
        st.parsing = False
        view = None if fut.cancelled() or fut.exception() is not None else fut.result()
        if view is None:
            st.skip = True
            self.counts["skipped"] += 1
            return
        st.view = view
        self._guard(self._maybe_observe, ctx, st)

    def _maybe_observe(self, ctx: RequestContext, st: RequestState) -> None:
        """Observe once the view is built and the engine accepted the request (either order); a
        response that already ended is observed right after."""
        if st.skip or st.view is None or not st.accepted or st.observed is not None:
            return
        self._observe_request(ctx, st)
        if st.end is not None:
            self._observe_response(ctx, st, *st.end)

    def _end_response(self, ctx: RequestContext, st: RequestState) -> None:
        if st.observed is not None:
            assert st.end is not None, "on_response_end sets it before scheduling this"
            self._observe_response(ctx, st, *st.end)
        elif not st.parsing and st.tap is not None:  # never observed (skipped): free the tap
            st.tap.close()

    def _observe_request(self, ctx: RequestContext, st: RequestState) -> None:
        t0 = self.clock()
        view = st.view
        assert view is not None, "only called from _maybe_observe, once the view is built"
        # the session keeps the context as the body bytes (shared with the forwarder), not parsed JSON
        # the session keeps the routing key its request went out with: the client's own, or the
        # engine session id the proxy added (bound to the conversation below, once it is named)
        payload = (
            BodyPayload(ctx.path, ctx.body, routing_key(ctx.headers, ctx.json))
            if view.context_payload is not None and isinstance(ctx.body, bytes)
            else None
        )
        st.observed = self.policy.observe_request(view, ctx.started, payload)
        routed = self._bind_tag(st, view.tenant, st.observed.conversation)
        if routed is not None and payload is not None:
            payload.routing = routed
        if self.session_cache is not None and not view.is_warmup:
            self.session_cache.on_request(view.tenant, st.observed.session_id, ctx.started)
        if not view.is_warmup and ctx.request_id in self._states:
            self.running.add(view.block_hashes, view.block_tokens)
            st.held = True
        self.counts["observed"] += 1
        hints = self.hints
        if hints is not None and not view.is_warmup:
            st.hints = request_hints(self._hint_body(ctx), ctx.headers)
            hints.on_request(
                st.hints, ctx.headers, view.tenant, st.observed.session_id, st.observed.agent_id, ctx.started
            )
        if self.metrics is not None:
            if st.observed.predicted is not None:
                self.metrics.prediction_total.labels("hit" if st.observed.predicted else "miss").inc()
            if not view.is_warmup:
                self.metrics.predicted_cached_tokens_total.inc(max(0, int(st.observed.resident_tokens or 0)))
        self.plan(self.clock())
        spent = self.clock() - t0
        self.counts["deferred_observe_us"] += int(1e6 * spent)
        if self.metrics is not None:  # the forwarder does not time hooks; observe+plan is recorded here
            self.metrics.policy_observe_seconds.observe(spent)

    def _hint_body(self, ctx: RequestContext) -> dict:
        """The body whose hint fields are read: parsed inline, or (a body the worker viewed) parsed
        here only when its bytes mention a hint field, as `hints_strip_fields` does."""
        if isinstance(ctx.json, dict):
            return ctx.json
        data = parse_if_hinted(ctx.body) if 0 < len(ctx.body) <= self.limits.max_body_bytes else None
        return data if isinstance(data, dict) else {}

    def _observe_response(self, ctx: RequestContext, st: RequestState, error: str | None, now: float) -> None:
        if st.held and st.view is not None:
            st.held = False
            self.running.remove(st.view.block_hashes)
        if st.observed is None or st.view is None or st.done:
            return
        st.done = True
        tap = st.tap
        self.counts["responses"] += 1
        # a client that hung up after the stream's end (`[DONE]`) got its whole answer: learn from it
        if tap is None or (error is not None and not tap.complete):
            if tap is not None:
                tap.close()
            outcome = ResponseOutcome(finish_reason=None)
        else:
            tap.finish()
            outcome = ResponseOutcome(
                finish_reason=tap.finish_reason,
                prompt_tokens=tap.prompt_tokens,
                cached_tokens=tap.cached_tokens,
                output_tokens=tap.output_tokens,
                assistant_payload=tap.assistant_message() if tap.finish_reason == "tool_calls" else None,
            )
            if not st.view.is_warmup and self.selfeval is not None:  # switchback: client-visible timing
                first = tap.first_token_at if tap.first_token_at is not None else now
                self.selfeval.record_outcome(
                    ctx.started, first - ctx.started, now - ctx.started, tap.prompt_tokens or 0, tap.cached_tokens or 0
                )
                self._credit_yield(st, tap.prompt_tokens or 0, tap.cached_tokens or 0, now)
            if not st.view.is_warmup and tap.prompt_tokens:
                self._learn_from_usage(st, tap, ctx.started)
        self.policy.observe_response(st.observed.request_id, outcome, now)
        if self.session_cache is not None and not st.view.is_warmup:
            self.session_cache.on_response(st.view.tenant, st.observed.session_id, outcome.finish_reason, now)
        if self.session_lane is not None and st.observed.session_id and not st.view.is_warmup:
            served = max(0, (outcome.prompt_tokens or 0) - (outcome.cached_tokens or 0)) + (outcome.output_tokens or 0)
            self.session_lane.served((st.view.tenant, st.observed.session_id), served, ctx.started, now)
        if st.hints is not None and self.hints is not None:
            self.hints.on_response(
                st.hints, ctx.headers, st.observed.session_id, outcome.finish_reason, now, st.view.tenant
            )
        self.plan(self.clock())

    # -- planning and results -----------------------------------------------------------------------
    def plan(self, now: float) -> int:
        """Ask the core for actions and queue them; called after each observation and on a timer."""
        if self.executor is None:
            return 0
        for rid, started in list(self._inflight.items()):
            if now - started > STALE_INFLIGHT_S:  # a hook that never ended must not pause actions forever
                del self._inflight[rid]
                st = self._states.pop(rid, None)
                if st is not None and st.held and st.view is not None:
                    st.held = False
                    self.running.remove(st.view.block_hashes)
        actions = self.policy.plan(now, self.load())
        return self.executor.submit(self.route_actions(actions)) if actions else 0
