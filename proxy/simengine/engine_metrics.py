"""The simulated engine's /metrics, under the real engines' names and types.

Why the real names: the proxy's scraper, the dashboards and the tests read `vllm:*` (and, for the
SGLang-style priority mode, `sglang:*`) from real engines; the sim must be indistinguishable to
them. Each app gets its own `CollectorRegistry` (no globals), so tests can run many sims at once.
Token counters follow vLLM: queries = prompt tokens of each admitted request, hits = its cached
tokens; times are the engine's virtual seconds (equal to wall seconds at --speed 1).

Host tier (`--cpu-blocks`): vLLM's connector and offloading metrics (names as in vLLM 0.32's
offloading connector and CPU backend) — `vllm:external_prefix_cache_{queries,hits}` (tokens: queries
= prompt tokens beyond the local hit, hits = tokens loaded), `vllm:kv_offload_{load,store}_{bytes,
time}`, the deprecated `vllm:kv_offload_total_{bytes,time}` by `transfer_type` (CPU_to_GPU,
GPU_to_CPU) that vLLM still exports, `vllm:kv_offload_cpu_cache_usage_perc`; vLLM has no block
counters for the CPU tier, so its lookups, hits and evictions are `cachescout_sim_host_*` (blocks).
Always `vllm:prompt_tokens_by_source{source=local_compute|local_cache_hit|external_kv_transfer}`.
`vllm:prompt_tokens_cached` counts both sources, as vLLM's does; `vllm:prefix_cache_hits` only the GPU.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from proxy.simengine.engine import EngineRequest, SimEngine, StepResult

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
BLOCK_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


class SimEngineMetrics:
    def __init__(self, registry: CollectorRegistry, model: str, engine: SimEngine):
        self.registry = registry
        self.engine = engine
        cfg = engine.config
        lab = ["model_name", "engine"]
        self._lv = (model, "0")
        self.queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.", lab, registry=registry)
        self.hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", lab, registry=registry)
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Prompt tokens of admitted requests (cached or not).", lab, registry=registry
        )
        self.cached_prompt = Counter("vllm:prompt_tokens_cached", "Cached prompt tokens.", lab, registry=registry)
        self.gen_tokens = Counter("vllm:generation_tokens", "Generation tokens processed.", lab, registry=registry)
        self.success = Counter(
            "vllm:request_success", "Finished requests.", lab + ["finished_reason"], registry=registry
        )
        self.usage = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage (held blocks / all blocks), 1 = 100%.", lab, registry=registry
        )
        self.running = Gauge(
            "vllm:num_requests_running", "Requests in model execution batches.", lab, registry=registry
        )
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to be processed.", lab, registry=registry)
        self.preemptions = Counter(
            "vllm:num_preemptions", "Cumulative number of preemptions from the engine.", lab, registry=registry
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token (virtual seconds).",
            lab,
            buckets=TTFT_BUCKETS,
            registry=registry,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "End-to-end request latency (virtual seconds).",
            lab,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        info_labels = {
            "block_size": str(cfg.block_size),
            "num_gpu_blocks": str(cfg.capacity_blocks),
            "eviction": cfg.eviction,
            # the proxy's sim adapter reads these (vLLM's own /metrics has no such labels)
            "scheduling_policy": str(getattr(cfg, "scheduling_policy", "fcfs")),
            "low_priority_values_first": str(bool(getattr(cfg, "low_priority_values_first", False))).lower(),
        }
        if cfg.cpu_blocks:  # vLLM CacheConfig: kv_offloading_size (GiB), kv_offloading_backend
            gib = cfg.cpu_blocks * cfg.block_size * cfg.cost.kv_bytes_per_token / (1 << 30)
            info_labels.update(kv_offloading_size=f"{gib:.6g}", kv_offloading_backend="native")
        info = Gauge("vllm:cache_config_info", "Cache configuration.", list(info_labels), registry=registry)
        info.labels(**info_labels).set(1)
        kv_lab = ["model_name", "engine"]
        self.block_hist = {
            kind: Histogram(f"vllm:kv_block_{kind}_seconds", help_, kv_lab, buckets=BLOCK_BUCKETS, registry=registry)
            for kind, help_ in (
                ("idle_before_evict", "Seconds a block sat unused before eviction (virtual)."),
                ("lifetime", "Seconds from a block's caching to its eviction (virtual)."),
                ("reuse_gap", "Seconds between two uses of a cached block (virtual)."),
            )
        }
        engine.pool.enable_block_times()
        self.evicted = Counter(
            "cachescout_sim_evicted_blocks", "Cached blocks evicted by the simulated engine.", registry=registry
        )
        self._evicted_seen = 0
        self.sglang = cfg.eviction == "priority"
        if self.sglang:
            sl = ["model_name"]
            self.sg_hit = Gauge(
                "sglang:cache_hit_rate", "Prefix cache hit rate since start (tokens), 0..1.", sl, registry=registry
            )
            self.sg_usage = Gauge(
                "sglang:token_usage", "Share of KV tokens held by running requests, 0..1.", sl, registry=registry
            )
            self.sg_used = Gauge("sglang:num_used_tokens", "KV tokens held by running requests.", sl, registry=registry)
            self.sg_running = Gauge("sglang:num_running_reqs", "Running requests.", sl, registry=registry)
            self.sg_queue = Gauge("sglang:num_queue_reqs", "Queued requests.", sl, registry=registry)
            # SGLang's TTFT histogram (same observations as vllm:time_to_first_token_seconds), so the
            # dashboards' SGLang TTFT panels have data against the sim in priority mode.
            self.sg_ttft = Histogram(
                "sglang:time_to_first_token_seconds",
                "Time to first token (virtual seconds).",
                sl,
                buckets=TTFT_BUCKETS,
                registry=registry,
            )
        self.by_source = Counter(
            "vllm:prompt_tokens_by_source",
            "Prompt tokens by where their KV came from.",
            lab + ["source"],
            registry=registry,
        )
        for src in ("local_compute", "local_cache_hit", "external_kv_transfer"):
            self.by_source.labels(*self._lv, src)
        self.tier = engine.host is not None
        self._seen: dict[str, float] = {}
        if self.tier:
            self.ext_queries = Counter(
                "vllm:external_prefix_cache_queries",
                "Tokens looked up in the KV connector (host tier).",
                lab,
                registry=registry,
            )
            self.ext_hits = Counter(
                "vllm:external_prefix_cache_hits",
                "Tokens loaded from the KV connector (host tier).",
                lab,
                registry=registry,
            )
            self.off_bytes = Counter(
                "vllm:kv_offload_total_bytes",
                "Number of bytes offloaded by KV connector (deprecated in vLLM; see kv_offload_load/store_bytes).",
                lab + ["transfer_type"],
                registry=registry,
            )
            self.off_time = Counter(
                "vllm:kv_offload_total_time",
                "Total time of KV offloading operations (virtual seconds; deprecated in vLLM).",
                lab + ["transfer_type"],
                registry=registry,
            )
            self.flat = {
                (tt, kind): Counter(f"vllm:kv_offload_{op}_{kind}", help_, lab, registry=registry)
                for tt, op in (("CPU_to_GPU", "load"), ("GPU_to_CPU", "store"))
                for kind, help_ in (
                    ("bytes", f"Total bytes of KV offload {op}s."),
                    ("time", f"Total KV offload {op} time, virtual seconds."),
                )
            }
            self.cpu_usage = Gauge(
                "vllm:kv_offload_cpu_cache_usage_perc", "Host tier blocks in use, 0..1.", lab, registry=registry
            )
            self.cpu_counts = {
                name: Counter(f"cachescout_sim_host_{name}_blocks", help_, registry=registry)
                for name, help_ in (
                    ("lookup", "Blocks looked up in the simulated host tier."),
                    ("hit", "Blocks found in the simulated host tier."),
                    ("evicted", "Blocks evicted from the simulated host tier."),
                )
            }
            for m in (self.ext_queries, self.ext_hits, self.cpu_usage, *self.flat.values()):
                m.labels(*self._lv)
            for tt in ("CPU_to_GPU", "GPU_to_CPU"):
                self.off_bytes.labels(*self._lv, tt)
                self.off_time.labels(*self._lv, tt)
        for m in (
            self.queries,
            self.hits,
            self.prompt_tokens,
            self.cached_prompt,
            self.gen_tokens,
            self.usage,
            self.running,
            self.waiting,
            self.preemptions,
        ):
            m.labels(*self._lv)
        self.refresh()

    def on_step(self, res: StepResult) -> None:
        lv = self._lv
        for r in res.admitted:
            self.queries.labels(*lv).inc(r.prompt_len)
            self.hits.labels(*lv).inc(r.cached_tokens - r.loaded_tokens)  # GPU tier only
            self.prompt_tokens.labels(*lv).inc(r.prompt_len)
            self.cached_prompt.labels(*lv).inc(r.cached_tokens)
            local = r.cached_tokens - r.loaded_tokens
            self.by_source.labels(*lv, "local_cache_hit").inc(local)
            self.by_source.labels(*lv, "external_kv_transfer").inc(r.loaded_tokens)
            self.by_source.labels(*lv, "local_compute").inc(r.prompt_len - r.cached_tokens)
        if res.preempted:
            self.preemptions.labels(*lv).inc(len(res.preempted))
        if res.emitted:
            self.gen_tokens.labels(*lv).inc(len(res.emitted) * res.steps)
        for r in res.emitted:
            if r.generated == 1 and r.first_token_at is not None:
                self.ttft.labels(*lv).observe(r.first_token_at - r.arrival)
                if self.sglang:
                    self.sg_ttft.labels(lv[0]).observe(r.first_token_at - r.arrival)
        self.refresh()

    def on_finish(self, r: EngineRequest, finish_reason: str) -> None:
        reason = "stop" if finish_reason == "tool_calls" else finish_reason  # engine-level reasons
        self.success.labels(*self._lv, reason).inc()
        if r.finished_at is not None:
            self.e2e.labels(*self._lv).observe(r.finished_at - r.arrival)

    def refresh(self) -> None:
        eng, lv = self.engine, self._lv
        st = eng.pool.stats()
        self.usage.labels(*lv).set(st.usage)
        self.running.labels(*lv).set(len(eng.running))
        self.waiting.labels(*lv).set(len(eng.waiting))
        for kind, seconds in eng.pool.drain_time_samples():
            self.block_hist[kind].labels(*lv).observe(seconds)
        if st.evictions > self._evicted_seen:
            self.evicted.inc(st.evictions - self._evicted_seen)
            self._evicted_seen = st.evictions
        if self.tier:
            self._refresh_tier()
        if self.sglang:
            q = eng.prompt_tokens_queried
            self.sg_hit.labels(lv[0]).set(eng.prompt_tokens_hit / q if q else 0.0)
            self.sg_usage.labels(lv[0]).set(st.usage)
            self.sg_used.labels(lv[0]).set(st.held * eng.config.block_size)
            self.sg_running.labels(lv[0]).set(len(eng.running))
            self.sg_queue.labels(lv[0]).set(len(eng.waiting))

    def _delta(self, key: str, value: float) -> float:
        """Increase of a cumulative engine counter since the last refresh."""
        d = value - self._seen.get(key, 0.0)
        self._seen[key] = value
        return d if d > 0 else 0.0

    def _refresh_tier(self) -> None:
        eng, lv = self.engine, self._lv
        assert eng.host is not None, "called only when self.tier (the engine has a host tier)"
        host = eng.host.stats()
        self.ext_queries.labels(*lv).inc(self._delta("ext_q", eng.external_queried))
        self.ext_hits.labels(*lv).inc(self._delta("ext_h", eng.external_hit))
        for tt, (nbytes, secs) in eng.offload.items():
            db, dt = self._delta(f"b/{tt}", nbytes), self._delta(f"t/{tt}", secs)
            self.off_bytes.labels(*lv, tt).inc(db)
            self.off_time.labels(*lv, tt).inc(dt)
            self.flat[(tt, "bytes")].labels(*lv).inc(db)
            self.flat[(tt, "time")].labels(*lv).inc(dt)
        self.cpu_usage.labels(*lv).set(host.usage)
        for name, value in (("lookup", host.lookups), ("hit", host.hits), ("evicted", host.evictions)):
            self.cpu_counts[name].inc(self._delta(name, value))
