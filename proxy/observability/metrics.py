"""Every `cachescout_*` Prometheus metric, defined once, on a per-app registry.

Why one module: names, units, label sets and buckets are a contract with the dashboards and alerts;
defining them in one place stops two areas from registering the same name with different labels.
Why a per-app registry (no globals): tests build many apps in one process, and each must start from
zero. Other areas never create metrics: they receive this object and call its attributes, e.g.
`metrics.actions_total.labels(kind="touch", reason="transition", outcome="ok").inc()`.

Route labels are a fixed set (`route_label`), never a raw path, so a client cannot blow up the
series count by requesting random URLs.
"""

from __future__ import annotations

from collections import Counter as _Tally

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from proxy.core.plan_registry import ACTION_REASONS, SKIP_PAIRS

KNOWN_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/v1/models")
OTHER_ROUTE = "other"
CODE_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
UPSTREAM_ERROR_KINDS = ("connect", "timeout", "protocol", "other")
UPSTREAM_RETRY_REASONS = ("closed", "reset")
ACTION_OUTCOMES = ("ok", "error", "dropped_stale", "dropped_busy", "dropped_full", "unsupported")
ACTION_KINDS = ("touch", "warm", "retain")
# the action reasons: the registered sources' (core/plan_registry.ACTION_REASONS), imported above
# why a client request was not learned from (cachescout_policy_skipped_total{reason}); not the
# planner's skip reasons (core/plan_registry.SKIP_PAIRS, cachescout_planner_skips_total{reason, piece})
REQUEST_SKIP_REASONS = ("rejected", "not_allowed", "body_too_large", "offload_full", "parse_budget")
MEMORY_STORES = ("sessions", "fanout", "tap", "agents")
# What the client-facing connection limits did (proxy/http/server_limits.py counts here, process-wide:
# one server per process); exported as cachescout_connections_shed_total{reason} at each scrape.
CONNECTION_EVENTS: _Tally[str] = _Tally()
CONNECTION_REASONS = ("idle", "slow_header", "slow_body", "body_timeout", "header_timeout", "refused")
HINT_KINDS = ("tool_started", "tool_finished", "fanout", "session_ended", "next_agent", "pin", "retain", "invalid")
HINT_OUTCOMES = ("accepted", "ignored_standing", "ignored_unchecked", "refused", "invalid")
HINT_SOURCE_LABELS = 16

_ROUTE_SET = frozenset(KNOWN_ROUTES)

# Request latency spans 1 ms (a cached /v1/models) to minutes (a long generation).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
FIRST_BYTE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)
# The policy's budget on the request path is microseconds.
OBSERVE_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2)


def route_label(path: str) -> str:
    """The bounded `route` label for a request path."""
    return path if path in _ROUTE_SET else OTHER_ROUTE


def code_class(status: int) -> str:
    """'2xx' for 200..299 etc.; anything out of range counts as 5xx (it is a server fault)."""
    return f"{status // 100}xx" if 100 <= status < 600 else "5xx"


class ProxyMetrics:
    """All metrics of one proxy instance. Attribute name = metric name without `cachescout_`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry

        # --- forwarder (proxy/http) --------------------------------------------------------
        self.requests_total = Counter(
            "cachescout_requests_total",
            "Client requests forwarded, by route and status class",
            ("route", "code_class"),
            registry=r,
        )
        self.request_duration_seconds = Histogram(
            "cachescout_request_duration_seconds",
            "Client request duration until the last byte was sent, seconds",
            ("route",),
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.upstream_first_byte_seconds = Histogram(
            "cachescout_upstream_first_byte_seconds",
            "Time from receipt to upstream response headers, seconds",
            ("route",),
            buckets=FIRST_BYTE_BUCKETS,
            registry=r,
        )
        self.inflight_requests = Gauge(
            "cachescout_inflight_requests", "Client requests currently being forwarded", registry=r
        )
        self.upstream_errors_total = Counter(
            "cachescout_upstream_errors_total",
            "Upstream failures seen by the forwarder, by kind",
            ("kind",),
            registry=r,
        )
        self.upstream_retries_total = Counter(
            "cachescout_upstream_retries_total",
            "Requests sent once more on a new connection because the engine closed or reset a reused "
            "keep-alive connection before any response byte (reason: closed or reset; outcome: the resend "
            "answered, or failed and the client got the 502/504)",
            ("reason", "outcome"),
            registry=r,
        )

        # --- policy actions (proxy/runtime/executor) ----------------------------------------
        self.actions_total = Counter(
            "cachescout_actions_total",
            "Cache actions planned, by kind, reason and outcome",
            ("kind", "reason", "outcome"),
            registry=r,
        )
        self.warmup_tokens_total = Counter(
            "cachescout_warmup_tokens_total", "Prompt tokens sent in warmup/touch requests", registry=r
        )
        self.action_queue_depth = Gauge(
            "cachescout_action_queue_depth", "Actions waiting in the executor queue", registry=r
        )

        # --- learned state (proxy/runtime/live_policy) --------------------------------------
        self.prediction_total = Counter(
            "cachescout_prediction_total",
            "Next-agent predictions checked against the real next agent",
            ("outcome",),
            registry=r,
        )
        self.predictability_ratio = Gauge(
            "cachescout_predictability_ratio",
            "Predictability gate R (entropy reduction of next agent), 0..1",
            registry=r,
        )
        self.agents = Gauge("cachescout_agents", "Agents (prompt-prefix fingerprints) currently tracked", registry=r)
        self.sessions = Gauge("cachescout_sessions", "Sessions currently tracked", registry=r)
        self.policy_errors_total = Counter(
            "cachescout_policy_errors_total",
            "Exceptions raised by the policy/observer (never seen by clients)",
            registry=r,
        )
        self.policy_observe_seconds = Histogram(
            "cachescout_policy_observe_seconds",
            "Time spent in observe+plan on the request path, seconds",
            buckets=OBSERVE_BUCKETS,
            registry=r,
        )

        # --- cache effect (usage + engine scrape) ------------------------------------------
        self.engine_prefix_cache_hit_ratio = Gauge(
            "cachescout_engine_prefix_cache_hit_ratio", "Engine-reported prefix cache hit ratio, 0..1", registry=r
        )
        self.prompt_tokens_total = Counter(
            "cachescout_prompt_tokens_total", "usage.prompt_tokens of client requests", registry=r
        )
        self.cached_prompt_tokens_total = Counter(
            "cachescout_cached_prompt_tokens_total",
            "usage.prompt_tokens_details.cached_tokens of client requests",
            registry=r,
        )
        self.predicted_cached_tokens_total = Counter(
            "cachescout_predicted_cached_tokens_total",
            "Residency shadow's predicted cached tokens of client requests",
            registry=r,
        )
        self.converted_tokens_total = Counter(
            "cachescout_converted_tokens_total",
            "Acted-on tokens that became a real cache hit, by action reason",
            ("reason",),
            registry=r,
        )

        # --- hardening: what the policy skipped or dropped to stay bounded (issue 13) --------
        self.policy_skipped_total = Counter(
            "cachescout_policy_skipped_total",
            "Client requests the policy did not learn from, by reason "
            "(rejected = engine answered non-2xx, not_allowed = auth not in the allow-list, body_too_large, "
            "offload_full = parse worker queue full, parse_budget = parse worker over its time share)",
            ("reason",),
            registry=r,
        )
        self.policy_shed_ratio = Gauge(
            "cachescout_policy_shed_ratio",
            "Share of client requests (since start) the policy did not learn from to protect the event loop "
            "or its memory: body_too_large + offload_full + parse_budget over all requests",
            registry=r,
        )
        self.connections_shed_total = Counter(
            "cachescout_connections_shed_total",
            "Client connections closed by the server limits, by reason (idle / slow_header / slow_body = shed "
            "at the connection cap; body_timeout, header_timeout = 408; refused = 503 at the cap, all busy)",
            ("reason",),
            registry=r,
        )
        for reason in CONNECTION_REASONS:
            self.connections_shed_total.labels(reason)
        self._connection_events_seen: dict[str, int] = {}
        self.memory_drops_total = Counter(
            "cachescout_memory_drops_total",
            "Kept state dropped to stay within its byte budget, by store "
            "(sessions, fanout = parked fan-out parents, tap = response readers, agents = anchors)",
            ("store",),
            registry=r,
        )
        self.kept_bytes = Gauge(
            "cachescout_kept_bytes",
            "Estimated bytes the policy keeps, by store (sessions, tap, agents, prefix_index)",
            ("store",),
            registry=r,
        )
        # --- why the planner did not act (core/decisions.py; issue 26) ------------------------
        self.planner_skips_total = Counter(
            "cachescout_planner_skips_total",
            "Candidates (or whole ticks) the planner dropped, by skip reason (gate_closed, cooldown, "
            "resident, deferred, warm_*, not_worth_it, no_slot, budget, vetoed, ...) and the piece that "
            "dropped them (core/plan_registry.py names; tick, sessions, pricer, picker for the built-in stages)",
            ("reason", "piece"),
            registry=r,
        )
        for reason in REQUEST_SKIP_REASONS:
            self.policy_skipped_total.labels(reason)
        for piece, reason in SKIP_PAIRS:
            self.planner_skips_total.labels(reason, piece)
        for store in MEMORY_STORES:
            self.memory_drops_total.labels(store)

        # --- runtime hints (proxy/runtime/hint_inputs) -------------------------------------
        # kind: one of HINT_KINDS (or "invalid"); outcome: HINT_OUTCOMES. source: a hash-prefixed id
        # (never a key or a name), at most HINT_SOURCE_LABELS of them (the busiest), class: fact |
        # prediction. Bounded: 8 x 5 + 16 x 2 series at most.
        self.hints_total = Counter(
            "cachescout_hints_total",
            "Runtime hints received, by kind and admission outcome",
            ("kind", "outcome"),
            registry=r,
        )
        self.hint_source_standing = Gauge(
            "cachescout_hint_source_standing",
            "Calibrated standing of a hint source (posterior mean), 0..1",
            ("source", "class"),
            registry=r,
        )
        self.hint_released_tokens_total = Counter(
            "cachescout_hint_released_tokens_total",
            "Context tokens released from protection by session_ended hints",
            registry=r,
        )
        # Pre-bound children: the forwarder's per-request label lookups become dict hits, and every
        # route/class series exists from the start (dashboards show 0, not "no data").
        routes = (*KNOWN_ROUTES, OTHER_ROUTE)
        self._requests = {(rt, cc): self.requests_total.labels(rt, cc) for rt in routes for cc in CODE_CLASSES}
        self._durations = {rt: self.request_duration_seconds.labels(rt) for rt in routes}
        self._first_bytes = {rt: self.upstream_first_byte_seconds.labels(rt) for rt in routes}
        self._upstream_errors = {k: self.upstream_errors_total.labels(k) for k in UPSTREAM_ERROR_KINDS}
        self._upstream_retries = {
            (reason, outcome): self.upstream_retries_total.labels(reason, outcome)
            for reason in UPSTREAM_RETRY_REASONS
            for outcome in ("answered", "failed")
        }
        for outcome in ("hit", "miss"):
            self.prediction_total.labels(outcome)
        # The action series are a fixed, bounded set: create them all so rates read 0, not "no data".
        for kind in ACTION_KINDS:
            for reason in ACTION_REASONS:
                for outcome in ACTION_OUTCOMES:
                    self.actions_total.labels(kind, reason, outcome)
        for reason in ACTION_REASONS:
            self.converted_tokens_total.labels(reason)
        for kind in HINT_KINDS:
            for outcome in HINT_OUTCOMES:
                self.hints_total.labels(kind, outcome)
        self._define_self_evaluation(r)

    # --- self-evaluation (proxy/runtime/switchback.py): yield per signal, switchback ----------
    def _define_self_evaluation(self, r: CollectorRegistry) -> None:
        self.signal_saved_tokens_total = Counter(
            "cachescout_signal_saved_tokens_total",
            "Client prompt tokens an action saved (engine cached_tokens "
            "beyond the no-action counterfactual), by signal",
            ("reason",),
            registry=r,
        )
        self.signal_spent_tokens_total = Counter(
            "cachescout_signal_spent_tokens_total",
            "Tokens the engine prefilled for actions (their own "
            "prompt_tokens - cached_tokens), by signal and whether client traffic ran alongside",
            ("reason", "contended"),
            registry=r,
        )
        self.signal_yield_tokens = Gauge(
            "cachescout_signal_yield_tokens",
            "Decayed realised yield of a signal: saved - spent critical-path "
            "tokens (idle-time spending charged at yield_idle_cost_share)",
            ("reason",),
            registry=r,
        )
        self.signal_throttled = Gauge(
            "cachescout_signal_throttled",
            "1 while a signal is throttled for negative realised yield",
            ("reason",),
            registry=r,
        )
        self.signal_held_back_total = Counter(
            "cachescout_signal_held_back_total",
            "Actions not emitted because their signal is throttled",
            ("reason",),
            registry=r,
        )
        self.switchback_policy_active = Gauge(
            "cachescout_switchback_policy_active",
            "1 while the policy may act (0: observe-only window or state)",
            registry=r,
        )
        self.switchback_observe_only = Gauge(
            "cachescout_switchback_observe_only",
            "1 while the proxy has switched itself to observe-only (actions confidently hurt TTFT)",
            registry=r,
        )
        self.switchback_ttft_effect_seconds = Gauge(
            "cachescout_switchback_ttft_effect_seconds",
            "Load-adjusted TTFT effect of acting (on - off window "
            "means), seconds (source: decision or running; bound: estimate, low or high)",
            ("source", "bound"),
            registry=r,
        )
        self.switchback_ttft_effect_ratio = Gauge(
            "cachescout_switchback_ttft_effect_ratio",
            "The TTFT effect relative to observe-only windows' mean TTFT (-0.1 = 10% faster)",
            ("source", "bound"),
            registry=r,
        )
        self.switchback_hit_ratio = Gauge(
            "cachescout_switchback_hit_ratio",
            "Client-visible prefix hit ratio of the experiment's windows, by arm, 0..1",
            ("source", "arm"),
            registry=r,
        )
        self.switchback_windows_total = Counter(
            "cachescout_switchback_windows_total",
            "Switchback windows closed, by arm and whether they had enough requests to count",
            ("arm", "usable"),
            registry=r,
        )
        self.switchback_decisions_total = Counter(
            "cachescout_switchback_decisions_total", "Switchback decisions, by verdict", ("verdict",), registry=r
        )
        for reason in ACTION_REASONS:
            for m in (
                self.signal_saved_tokens_total,
                self.signal_yield_tokens,
                self.signal_throttled,
                self.signal_held_back_total,
            ):
                m.labels(reason)
            for contended in ("yes", "no"):
                self.signal_spent_tokens_total.labels(reason, contended)
        for arm in ("on", "off"):
            for usable in ("yes", "no"):
                self.switchback_windows_total.labels(arm, usable)
        for verdict in ("harmful", "helpful", "inconclusive"):
            self.switchback_decisions_total.labels(verdict)
        # no estimate yet: NaN (Prometheus stores it, Grafana draws a gap) rather than a missing series
        for source in ("decision", "running"):
            for bound in ("estimate", "low", "high"):
                self.switchback_ttft_effect_seconds.labels(source, bound).set(float("nan"))
                self.switchback_ttft_effect_ratio.labels(source, bound).set(float("nan"))
            for arm in ("on", "off"):
                self.switchback_hit_ratio.labels(source, arm).set(float("nan"))

    # --- fast paths for the forwarder ---------------------------------------------------------
    def observe_request(self, route: str, status: int, duration_s: float) -> None:
        self._requests[(route, code_class(status))].inc()
        self._durations[route].observe(duration_s)

    def observe_first_byte(self, route: str, seconds: float) -> None:
        self._first_bytes[route].observe(seconds)

    def upstream_error(self, kind: str) -> None:
        self._upstream_errors[kind if kind in self._upstream_errors else "other"].inc()

    def upstream_retry(self, reason: str, answered: bool) -> None:
        self._upstream_retries[(reason, "answered" if answered else "failed")].inc()

    def render(self) -> tuple[bytes, str]:
        seen = self._connection_events_seen
        for reason in CONNECTION_REASONS:
            n = CONNECTION_EVENTS.get(reason, 0)
            if n > seen.get(reason, 0):
                self.connections_shed_total.labels(reason).inc(n - seen.get(reason, 0))
                seen[reason] = n
        """Prometheus text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
