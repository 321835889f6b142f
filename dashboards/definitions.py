"""What the CacheScout dashboards show: every panel, the question it answers, and its queries.

Why code, not hand-edited JSON: Grafana's JSON is long and noisy, reviews of it are unreadable, and
copy-pasted queries drift. Here each panel is a few lines; `generate.py` renders the JSON and its
`--check` mode fails CI when the committed JSON is stale. Every query uses `$__rate_interval` for
rates and every panel the `${datasource}` variable, so the dashboards work on any Prometheus.

Counters are summed across proxy replicas (`sum(rate(...))`) before ratios are taken: a ratio of
sums is the token-weighted figure; an average of per-pod ratios is not.
"""

from __future__ import annotations

from dataclasses import dataclass

RI = "$__rate_interval"


@dataclass(frozen=True, slots=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    question: str  # the question the panel answers (panel description + docs)
    targets: tuple[Target, ...]
    unit: str = "short"
    kind: str = "timeseries"  # timeseries | stat
    min: float | None = None
    max: float | None = None


@dataclass(frozen=True, slots=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True, slots=True)
class Dashboard:
    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]


def rate(metric: str, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}[{RI}]))"


def ratio(num: str, den: str, by: str = "") -> str:
    return f"{rate(num, by)} / {rate(den, by)}"


def quantile(q: float, histogram: str, by: str = "le") -> str:
    return f"histogram_quantile({q}, sum by ({by}) (rate({histogram}_bucket[{RI}])))"


OVERVIEW = Dashboard(
    uid="cachescout-overview",
    title="CacheScout / overview",
    description="Is the proxy keeping the agents' prefixes cached, and what does it cost?",
    rows=(
        Row(
            "Cache effect",
            (
                Panel(
                    "Engine prefix-cache hit ratio",
                    "Is the engine's own prefix cache hitting? Token-weighted, from the engine's counters "
                    "(vLLM) or its gauge (SGLang); these include the proxy's warmups.",
                    (
                        Target(
                            ratio("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "job, instance"),
                            "vLLM {{instance}}",
                        ),
                        Target("avg by (job, instance) (sglang:cache_hit_rate)", "SGLang {{instance}}"),
                        Target(
                            "avg by (job, instance) (cachescout_engine_prefix_cache_hit_ratio)",
                            "seen by proxy {{instance}}",
                        ),
                    ),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
                Panel(
                    "Where the engine's prompt KV came from (host-memory tier)",
                    "With CPU KV offloading (vLLM --kv-offloading-size) an evicted prefix is loaded from host "
                    "memory instead of recomputed: prompt tokens per second by source (computed, GPU cache hit, "
                    "loaded). Empty on engines without a host tier.",
                    (
                        Target(
                            rate("vllm:prompt_tokens_by_source_total", "job, instance, source"),
                            "{{source}} {{instance}}",
                        ),
                        Target(
                            rate("vllm:external_prefix_cache_hits_total", "job, instance"),
                            "loaded from host memory {{instance}}",
                        ),
                    ),
                    unit="short",
                ),
                Panel(
                    "Hit ratio of agent requests: real vs predicted",
                    "Of the prompt tokens the agents sent through the proxy, what share did the engine serve "
                    "from cache (usage cached_tokens; warmups excluded), and does the proxy's residency "
                    "shadow predict it?",
                    (
                        Target(
                            ratio("cachescout_cached_prompt_tokens_total", "cachescout_prompt_tokens_total"), "real"
                        ),
                        Target(
                            ratio("cachescout_predicted_cached_tokens_total", "cachescout_prompt_tokens_total"),
                            "predicted by the shadow",
                        ),
                    ),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
                Panel(
                    "Warmup tokens vs prefill tokens",
                    "How many tokens per second does the proxy spend on warmups and touches, next to the "
                    "prompt tokens the engine had to prefill for the agents and those it served from cache?",
                    (
                        Target(rate("cachescout_warmup_tokens_total"), "warmup + touch tokens"),
                        Target(
                            rate("cachescout_prompt_tokens_total")
                            + " - "
                            + rate("cachescout_cached_prompt_tokens_total"),
                            "agents' prefilled tokens",
                        ),
                        Target(rate("cachescout_cached_prompt_tokens_total"), "agents' cached tokens"),
                    ),
                    unit="short",
                ),
                Panel(
                    "Conversion",
                    "Do the actions pay? Acted-on tokens that became a real cache hit, per reason, and their "
                    "share of the warmup tokens spent (token-weighted conversion).",
                    (
                        Target(rate("cachescout_converted_tokens_total", "reason"), "converted {{reason}}"),
                        Target(
                            ratio("cachescout_converted_tokens_total", "cachescout_warmup_tokens_total"),
                            "converted / warmup tokens",
                        ),
                    ),
                    unit="short",
                ),
            ),
        ),
        Row(
            "Policy",
            (
                Panel(
                    "Actions by kind, reason and outcome",
                    "What is the proxy doing to the engine (touch, warm, retain), why (transition, tool "
                    "resume, fan-out, hint), and how did it end (ok, error, dropped)?",
                    (
                        Target(
                            rate("cachescout_actions_total", "kind, reason, outcome"), "{{kind}} {{reason}} {{outcome}}"
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Predictability R and next-agent accuracy",
                    "Is the workload predictable enough to act on (R against the gate R_min), and how often "
                    "was the predicted next agent the real one?",
                    (
                        Target("max by (job, instance) (cachescout_predictability_ratio)", "R {{instance}}"),
                        Target(
                            ratio('cachescout_prediction_total{outcome="hit"}', "cachescout_prediction_total"),
                            "top-1 accuracy",
                        ),
                    ),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
            ),
        ),
        Row(
            "Latency and health",
            (
                Panel(
                    "Engine TTFT p50 / p99",
                    "How long do agents wait for the first token? From the engine's histograms; warm "
                    "prefixes should pull both quantiles down.",
                    (
                        Target(quantile(0.5, "vllm:time_to_first_token_seconds"), "vLLM p50"),
                        Target(quantile(0.99, "vllm:time_to_first_token_seconds"), "vLLM p99"),
                        Target(quantile(0.5, "sglang:time_to_first_token_seconds"), "SGLang p50"),
                        Target(quantile(0.99, "sglang:time_to_first_token_seconds"), "SGLang p99"),
                    ),
                    unit="s",
                ),
                Panel(
                    "Proxy overhead",
                    "What does the proxy add on the request path? The policy's observe+plan time per "
                    "request (p50/p99), next to the upstream's time to response headers.",
                    (
                        Target(quantile(0.5, "cachescout_policy_observe_seconds"), "policy p50"),
                        Target(quantile(0.99, "cachescout_policy_observe_seconds"), "policy p99"),
                        Target(quantile(0.5, "cachescout_upstream_first_byte_seconds"), "upstream headers p50"),
                        Target(quantile(0.99, "cachescout_upstream_first_byte_seconds"), "upstream headers p99"),
                    ),
                    unit="s",
                ),
                Panel(
                    "Requests by route and status class",
                    "How much traffic goes through the proxy, and how much of it fails?",
                    (Target(rate("cachescout_requests_total", "route, code_class"), "{{route}} {{code_class}}"),),
                    unit="reqps",
                ),
                Panel(
                    "Request duration p50 / p99",
                    "How long do client requests take end to end through the proxy (until the last byte)?",
                    (
                        Target(quantile(0.5, "cachescout_request_duration_seconds"), "p50"),
                        Target(quantile(0.99, "cachescout_request_duration_seconds"), "p99"),
                    ),
                    unit="s",
                ),
                Panel(
                    "Upstream errors",
                    "Is the engine reachable? Connect failures, timeouts and protocol errors seen by the "
                    "forwarder (clients got 502/504), and requests resent once because the engine dropped a "
                    "reused connection unanswered (an idle timeout shorter than upstream_keepalive_s).",
                    (
                        Target(rate("cachescout_upstream_errors_total", "kind"), "{{kind}}"),
                        Target(
                            rate("cachescout_upstream_retries_total", "reason,outcome"),
                            "resent {{reason}}, {{outcome}}",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Engine load",
                    "Is the engine busy? Its running and waiting requests, and the client requests in "
                    "flight through the proxy; the executor yields to client traffic when these grow.",
                    (
                        Target("sum by (job, instance) (vllm:num_requests_running)", "vLLM running {{instance}}"),
                        Target("sum by (job, instance) (vllm:num_requests_waiting)", "vLLM waiting {{instance}}"),
                        Target("sum by (job, instance) (cachescout_inflight_requests)", "proxy in flight {{instance}}"),
                    ),
                    unit="short",
                ),
                Panel(
                    "KV-cache usage",
                    "How full is the engine's KV cache? Near 1.0 the engine evicts, and warmups start to "
                    "compete with live prefixes.",
                    (
                        Target("avg by (job, instance) (vllm:kv_cache_usage_perc)", "vLLM {{instance}}"),
                        Target("avg by (job, instance) (sglang:token_usage)", "SGLang {{instance}}"),
                    ),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
            ),
        ),
    ),
)

POLICY = Dashboard(
    uid="cachescout-policy",
    title="CacheScout / policy",
    description="What has the proxy learned about the agents, and how is it acting on it?",
    rows=(
        Row(
            "Learned state",
            (
                Panel(
                    "Agents tracked",
                    "How many distinct agents (prompt-prefix fingerprints) does each proxy know?",
                    (Target("max by (job, instance) (cachescout_agents)", "{{instance}}"),),
                    kind="stat",
                ),
                Panel(
                    "Sessions tracked",
                    "How many conversations (explicit or inferred sessions) are live?",
                    (Target("max by (job, instance) (cachescout_sessions)", "{{instance}}"),),
                    kind="stat",
                ),
                Panel(
                    "Predictability R",
                    "Is the agent order predictable (1 = pipeline, ~0.1 = random)? Below R_min the proxy stays idle.",
                    (Target("max by (job, instance) (cachescout_predictability_ratio)", "{{instance}}"),),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
                Panel(
                    "Next-agent predictions",
                    "How many next-agent predictions were checked per second, and how many were right?",
                    (Target(rate("cachescout_prediction_total", "outcome"), "{{outcome}}"),),
                    unit="ops",
                ),
            ),
        ),
        Row(
            "Actions",
            (
                Panel(
                    "Top action reasons",
                    "Which signals drive the actions? The ten busiest (reason, kind) pairs; the label sets "
                    "are bounded, so this is the policy's 'top transitions' view without agent ids.",
                    (Target(f"topk(10, {rate('cachescout_actions_total', 'reason, kind')})", "{{reason}} {{kind}}"),),
                    unit="ops",
                ),
                Panel(
                    "Action outcomes",
                    "Are actions completing, or dropped because they went stale, the engine was busy or "
                    "the queue was full?",
                    (Target(rate("cachescout_actions_total", "outcome"), "{{outcome}}"),),
                    unit="ops",
                ),
                Panel(
                    "Action queue depth",
                    "Is the executor keeping up with the planner?",
                    (Target("max by (job, instance) (cachescout_action_queue_depth)", "{{instance}}"),),
                ),
                Panel(
                    "Converted tokens by reason",
                    "Which kind of signal turns into real cache hits (tokens per second)?",
                    (Target(rate("cachescout_converted_tokens_total", "reason"), "{{reason}}"),),
                ),
            ),
        ),
        Row(
            "Policy health",
            (
                Panel(
                    "Policy time on the request path",
                    "Is the policy staying within its microsecond budget per request?",
                    (
                        Target(quantile(0.5, "cachescout_policy_observe_seconds"), "p50"),
                        Target(quantile(0.99, "cachescout_policy_observe_seconds"), "p99"),
                    ),
                    unit="s",
                ),
                Panel(
                    "Policy errors",
                    "Is the policy failing? Exceptions caught and counted; clients never see them.",
                    (Target(rate("cachescout_policy_errors_total"), "errors"),),
                    unit="ops",
                ),
                Panel(
                    "Requests not learned from",
                    "Which client requests did the policy skip: rejected by the engine (non-2xx), auth not "
                    "in the allow-list, body too large to read, parse worker full?",
                    (Target(rate("cachescout_policy_skipped_total", "reason"), "{{reason}}"),),
                    unit="ops",
                ),
                Panel(
                    "Why the planner did not act",
                    "Which stage dropped the candidates: a shut R gate, cooldown, already resident, deferred to "
                    "the response end, a warm refused, not worth its cost, no slot or budget, vetoed? "
                    "(/debug/state -> decisions shows the recent ones with their figures.)",
                    (Target(rate("cachescout_planner_skips_total", "reason"), "{{reason}}"),),
                    unit="ops",
                ),
                Panel(
                    "Share shed to protect the proxy",
                    "How much traffic does the policy drop to keep the event loop and memory bounded "
                    "(body too large, parse worker full or over its time share), since start?",
                    (Target("max(cachescout_policy_shed_ratio)", "shed share"),),
                    unit="percentunit",
                ),
                Panel(
                    "Client connections shed",
                    "Are idle or slow clients crowding the connection cap? Connections closed per second: "
                    "shed at the cap (idle, slow_header, slow_body), timed out (408) or refused (503).",
                    (Target(rate("cachescout_connections_shed_total", "reason"), "{{reason}}"),),
                    unit="ops",
                ),
                Panel(
                    "Memory budget",
                    "Is the policy within its byte budgets? Kept bytes by store, and drops per second "
                    "made to stay within them (oldest sessions first).",
                    (
                        Target("max by (store) (cachescout_kept_bytes)", "kept {{store}}"),
                        Target(rate("cachescout_memory_drops_total", "store"), "drops {{store}}"),
                    ),
                    unit="bytes",
                ),
            ),
        ),
        # --- self-evaluation (issue 11): does acting pay on this traffic? --------------------------
        Row(
            "Self-evaluation",
            (
                Panel(
                    "Realised yield per signal",
                    "Does each signal save more than it costs? Decayed saved − spent critical-path tokens "
                    "(engine-reported cached_tokens beyond the no-action counterfactual, minus the actions' "
                    "own prefill; idle-time prefill charged at yield_idle_cost_share). Below 0 the signal "
                    "is throttled.",
                    (Target("sum by (reason) (cachescout_signal_yield_tokens)", "{{reason}}"),),
                ),
                Panel(
                    "Saved vs spent tokens per signal",
                    "Token flows behind the yield: tokens saved for clients against tokens prefilled for "
                    "actions (spent split by whether client traffic ran alongside).",
                    (
                        Target(rate("cachescout_signal_saved_tokens_total", "reason"), "saved {{reason}}"),
                        Target(
                            rate("cachescout_signal_spent_tokens_total", "reason, contended"),
                            "spent {{reason}} contended={{contended}}",
                        ),
                    ),
                ),
                Panel(
                    "Throttled signals",
                    "Which signals are held back for negative yield, and how many actions that cost them "
                    "(each still acts once per yield_explore_interval_s, so it can recover)?",
                    (
                        Target("max by (reason) (cachescout_signal_throttled)", "throttled {{reason}}"),
                        Target(rate("cachescout_signal_held_back_total", "reason"), "held back/s {{reason}}"),
                    ),
                ),
                Panel(
                    "Switchback: TTFT effect of acting",
                    "Does acting lower client TTFT? Load-adjusted difference of policy-on and observe-only "
                    "window means relative to observe-only TTFT, with its confidence interval (last decision "
                    "and the running batch). Negative = faster.",
                    (
                        Target(
                            'avg by (bound) (cachescout_switchback_ttft_effect_ratio{source="decision"})',
                            "decision {{bound}}",
                        ),
                        Target(
                            'avg by (bound) (cachescout_switchback_ttft_effect_ratio{source="running"})',
                            "running {{bound}}",
                        ),
                        Target(
                            'avg by (bound) (cachescout_switchback_ttft_effect_seconds{source="decision"})',
                            "decision seconds {{bound}}",
                        ),
                    ),
                    unit="percentunit",
                ),
                Panel(
                    "Switchback: hit ratio by arm",
                    "Client-visible prefix hit ratio of policy-on vs observe-only windows (reported beside "
                    "the TTFT effect, never instead of it).",
                    (Target("avg by (source, arm) (cachescout_switchback_hit_ratio)", "{{source}} {{arm}}"),),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
                Panel(
                    "Switchback: state",
                    "Is the policy acting now, has it switched itself to observe-only (acting confidently "
                    "hurt TTFT), and what did the decisions and windows say?",
                    (
                        Target("max (cachescout_switchback_policy_active)", "acting"),
                        Target("max (cachescout_switchback_observe_only)", "observe-only (auto)"),
                        Target(
                            f"sum by (verdict) (increase(cachescout_switchback_decisions_total[{RI}]))",
                            "decisions {{verdict}}",
                        ),
                        Target(
                            rate("cachescout_switchback_windows_total", "arm, usable"),
                            "windows/s {{arm}} usable={{usable}}",
                        ),
                    ),
                ),
            ),
        ),
        # --- runtime hints (issue 16) ---
        Row(
            "Runtime hints",
            (
                Panel(
                    "Hints by kind and outcome",
                    "Which hints does the agent runtime send, and are they acted on, ignored (source standing "
                    "too low, too many unchecked) or refused (directive from an unlisted source)?",
                    (Target(rate("cachescout_hints_total", "kind, outcome"), "{{kind}} {{outcome}}"),),
                    unit="ops",
                ),
                Panel(
                    "Hint source standing",
                    "How far is each hint source trusted? Its calibrated standing (0..1) for facts and "
                    "predictions; a lying source falls below the floors (0.25 facts, 0.5 predictions).",
                    (Target("max by (source, class) (cachescout_hint_source_standing)", "{{source}} {{class}}"),),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
                Panel(
                    "Tokens released by session_ended",
                    "How much context stops being protected because the runtime said its session ended?",
                    (Target(rate("cachescout_hint_released_tokens_total"), "released tokens"),),
                ),
            ),
        ),
    ),
)

DASHBOARDS: tuple[Dashboard, ...] = (OVERVIEW, POLICY)
