"""Engine metrics the dashboards may query, besides the proxy's own `cachescout_*` metrics.

Why a list: a dashboard query against a misspelt or renamed engine metric silently shows "No data"
forever. The deploy tests check that every metric a dashboard queries is either defined by
`proxy.observability.metrics.ProxyMetrics` or listed here, with the engine that exports it and the
flag it needs. Names and types were read from the engines' code and docs (see
docs/metrics.md); the simulated engine (`cachescout sim-engine`) exports the vLLM names and, in
`--eviction priority` mode, some SGLang names, so most engine panels can be checked without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineMetric:
    name: str  # the series name as queried (counters keep their `_total`)
    type: str  # counter | gauge | histogram
    engine: str  # vllm | sglang
    meaning: str
    needs: str = ""  # engine flag that turns it on, when not on by default


KNOWN_ENGINE_METRICS: tuple[EngineMetric, ...] = (
    EngineMetric(
        "vllm:prefix_cache_queries_total",
        "counter",
        "vllm",
        "Prompt tokens looked up in the prefix cache",
        "--enable-prefix-caching",
    ),
    EngineMetric(
        "vllm:prefix_cache_hits_total",
        "counter",
        "vllm",
        "Prompt tokens found in the prefix cache (includes the proxy's warmups)",
        "--enable-prefix-caching",
    ),
    EngineMetric("vllm:kv_cache_usage_perc", "gauge", "vllm", "Share of KV-cache blocks in use, 0..1"),
    EngineMetric("vllm:num_requests_running", "gauge", "vllm", "Requests in the running batch"),
    EngineMetric("vllm:num_requests_waiting", "gauge", "vllm", "Requests waiting to be scheduled"),
    EngineMetric("vllm:time_to_first_token_seconds", "histogram", "vllm", "Time to first token, seconds"),
    EngineMetric(
        "vllm:prompt_tokens_by_source_total",
        "counter",
        "vllm",
        "Prompt tokens by where their KV came from: local_compute, local_cache_hit, external_kv_transfer",
    ),
    EngineMetric(
        "vllm:external_prefix_cache_hits_total",
        "counter",
        "vllm",
        "Prompt tokens loaded from the host-memory tier (KV connector / CPU offloading)",
        "--kv-offloading-size",
    ),
    EngineMetric(
        "vllm:kv_offload_total_bytes_total",
        "counter",
        "vllm",
        "KV bytes moved by the offloading connector, by transfer_type (CPU_to_GPU, GPU_to_CPU)",
        "--kv-offloading-size",
    ),
    EngineMetric("sglang:cache_hit_rate", "gauge", "sglang", "Radix-cache prefix hit rate, 0..1", "--enable-metrics"),
    EngineMetric("sglang:token_usage", "gauge", "sglang", "Share of KV-cache tokens in use, 0..1", "--enable-metrics"),
    EngineMetric("sglang:num_running_reqs", "gauge", "sglang", "Requests in the running batch", "--enable-metrics"),
    EngineMetric("sglang:num_queue_reqs", "gauge", "sglang", "Requests waiting in the queue", "--enable-metrics"),
    EngineMetric(
        "sglang:time_to_first_token_seconds", "histogram", "sglang", "Time to first token, seconds", "--enable-metrics"
    ),
)

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def engine_metric_names() -> dict[str, EngineMetric]:
    """Queryable series name -> metric (histograms also answer to _bucket/_sum/_count)."""
    names: dict[str, EngineMetric] = {}
    for metric in KNOWN_ENGINE_METRICS:
        names[metric.name] = metric
        if metric.type == "histogram":
            for suffix in HISTOGRAM_SUFFIXES:
                names[metric.name + suffix] = metric
    return names
