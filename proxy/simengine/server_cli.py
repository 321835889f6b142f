"""`cachescout sim-engine`: serve the simulated engine (OpenAI-compatible, prefix-cache model).

Example: cachescout sim-engine --port 8100 --capacity-blocks 2048 --eviction lru --speed 1.0
"""

from __future__ import annotations

import argparse

from proxy.cachemodel.cost_model import CostModel
from proxy.simengine.service import SimConfig

_D = SimConfig()
_C = CostModel()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    a("--port", type=int, default=8100, help="port (default 8100)")
    a("--model", default=_D.model, help=f"served model name (default {_D.model})")
    a("--block-size", type=int, default=_D.block_size, help="tokens per KV block (default 16)")
    a(
        "--capacity-blocks",
        type=int,
        default=_D.capacity_blocks,
        help=f"KV cache size in blocks (default {_D.capacity_blocks}: Llama-3.1-8B on one H100-80GB)",
    )
    a(
        "--eviction",
        choices=("lru", "priority"),
        default=_D.eviction,
        help="lru = vLLM free-queue order; priority = SGLang-style priority eviction with retention decay",
    )
    a(
        "--retention-seconds",
        type=float,
        default=_D.retention_seconds,
        help="priority mode: idle seconds after which a block's priority decays to the default",
    )
    a(
        "--scheduling-policy",
        choices=("fcfs", "priority"),
        default=_D.scheduling_policy,
        help="vLLM --scheduling-policy: fcfs (a non-zero request priority is refused, see --fcfs-priority) "
        "or priority (waiting heap on (priority, arrival), lower first; preempts the lowest-priority request)",
    )
    a(
        "--fcfs-priority",
        choices=("refuse", "ignore"),
        default=_D.fcfs_priority,
        help="under fcfs with lru eviction, a non-zero priority: refuse = HTTP 400 as documented by vLLM and "
        "done by its V0 engine; ignore = what vLLM's V1 engine does (vllm-project/vllm#22997)",
    )
    a(
        "--enable-priority-scheduling",
        action="store_true",
        help="SGLang priority scheduling: larger priority first (see --schedule-low-priority-values-first), a "
        "waiting request preempts running ones whose priority is lower by more than the threshold",
    )
    a(
        "--priority-scheduling-preemption-threshold",
        type=int,
        default=_D.priority_preemption_threshold,
        help="SGLang: minimum priority gap (exclusive) for a waiting request to preempt a running one (default 10)",
    )
    a(
        "--schedule-low-priority-values-first",
        action="store_true",
        help="SGLang: lower priority values run first (default: higher values first)",
    )
    a(
        "--long-prefill-token-threshold",
        type=int,
        default=_D.long_prefill_token_threshold,
        help="vLLM: at most this many tokens of one request per step (0 = off, default)",
    )
    a(
        "--scheduler-reserve-full-isl",
        action=argparse.BooleanOptionalAction,
        default=_D.reserve_full_isl,
        help="vLLM: admit a waiting request only when its whole current sequence fits in the free blocks, "
        "not just its first chunk (default on, as in vLLM)",
    )
    a(
        "--enable-session-radix-cache",
        action="store_true",
        help="SGLang: session-tagged KV (a request's body `session_id`); eviction takes unreferenced blocks "
        "before a live session's, /close_session dereferences them (docs/sglang-sessions.md)",
    )
    a(
        "--session-close-mode",
        choices=("deref", "free"),
        default=_D.session_close_mode,
        help="what /close_session does: deref = SGLang v0.5.17 (KV stays, evicted first), free = SGLang "
        "PR #27058 (blocks no other session or request holds are freed at once)",
    )
    a("--max-model-len", type=int, default=_D.max_model_len, help="context length limit in tokens")
    a("--max-num-batched-tokens", type=int, default=_D.max_num_batched_tokens, help="token budget per step")
    a("--max-num-seqs", type=int, default=_D.max_num_seqs, help="max running requests")
    a(
        "--speed",
        type=float,
        default=_D.speed,
        help="wall-clock speed-up: sleeps = virtual seconds / speed; 0 = never sleep (default 1.0)",
    )
    a("--output-tokens", type=int, default=_D.output_tokens, help="typical answer length in tokens")
    a("--output-jitter", type=float, default=_D.output_jitter, help="answer length spread, 0..1")
    a(
        "--tool-call-share",
        type=float,
        default=_D.tool_call_share,
        help="share of tool-offering requests answered with a tool call (default 0.5)",
    )
    a("--seed", type=int, default=_D.seed, help="seed mixed into the deterministic answers")
    a(
        "--no-prompt-tokens-details",
        action="store_true",
        help="omit usage.prompt_tokens_details (like vLLM without --enable-prompt-tokens-details)",
    )
    a("--prefill-tokens-per-s", type=float, default=1.0 / _C.prefill_token_s, help="prefill throughput")
    a("--step-base-ms", type=float, default=_C.step_base_s * 1000, help="fixed cost of each forward step")
    a(
        "--cpu-blocks",
        type=int,
        default=_D.cpu_blocks,
        help="host-memory (CPU offload) tier in blocks, like vLLM --kv-offloading-size; 0 = none (default)",
    )
    a(
        "--offload-bandwidth-gbps",
        type=float,
        default=_C.offload_gbps,
        help=f"host tier: effective CPU->GPU bandwidth in Gb/s (default {_C.offload_gbps:g})",
    )
    a(
        "--offload-latency-ms",
        type=float,
        default=_C.offload_latency_s * 1000,
        help=f"host tier: fixed cost of one load in ms (default {_C.offload_latency_s * 1000:g})",
    )
    a(
        "--kv-bytes-per-token",
        type=int,
        default=_C.kv_bytes_per_token,
        help=f"KV bytes per token of the modelled model (default {_C.kv_bytes_per_token}: Llama-3.1-8B bf16)",
    )
    a(
        "--kv-events-endpoint",
        default=None,
        help="publish vLLM-style KV events (ZMQ PUB + msgpack) on this endpoint, e.g. tcp://127.0.0.1:5557",
    )
    a(
        "--request-log",
        type=int,
        default=0,
        help="keep the last N requests (time, warmup header, block hashes, cached tokens) at "
        "GET /debug/requests, for checking where a router sent warmups and traffic (default 0 = off)",
    )
    a("--log-level", default="warning", help="uvicorn log level")


def config_from_args(args: argparse.Namespace) -> SimConfig:
    cost = CostModel(
        step_base_s=args.step_base_ms / 1000.0,
        prefill_token_s=1.0 / args.prefill_tokens_per_s,
        kv_bytes_per_token=args.kv_bytes_per_token,
        offload_gbps=args.offload_bandwidth_gbps,
        offload_latency_s=args.offload_latency_ms / 1000.0,
    )
    return SimConfig(
        model=args.model,
        block_size=args.block_size,
        capacity_blocks=args.capacity_blocks,
        eviction=args.eviction,
        retention_seconds=args.retention_seconds,
        max_model_len=args.max_model_len,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        speed=args.speed,
        output_tokens=args.output_tokens,
        output_jitter=args.output_jitter,
        tool_call_share=args.tool_call_share,
        seed=args.seed,
        prompt_tokens_details=not args.no_prompt_tokens_details,
        cost=cost,
        kv_events_endpoint=args.kv_events_endpoint,
        cpu_blocks=args.cpu_blocks,
        request_log=args.request_log,
        scheduling_policy=_policy(args),
        fcfs_priority=args.fcfs_priority,
        priority_preemption_threshold=args.priority_scheduling_preemption_threshold,
        low_priority_values_first=args.schedule_low_priority_values_first,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        reserve_full_isl=args.scheduler_reserve_full_isl,
        session_radix_cache=args.enable_session_radix_cache,
        session_close_mode=args.session_close_mode,
    )


def _policy(args: argparse.Namespace) -> str:
    if args.enable_priority_scheduling:
        if args.scheduling_policy != "fcfs":
            raise ValueError("--enable-priority-scheduling (SGLang) excludes --scheduling-policy priority (vLLM)")
        return "sglang"
    return str(args.scheduling_policy)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.simengine.server import create_sim_app

    try:
        config = config_from_args(args)
    except (ValueError, ZeroDivisionError) as exc:
        print(f"cachescout sim-engine: {exc}")
        return 2
    print(
        f"cachescout sim-engine: model={config.model} capacity={config.capacity_blocks} blocks "
        f"x {config.block_size} tokens, eviction={config.eviction}, scheduling={config.scheduling_policy}, "
        f"host tier={config.cpu_blocks} blocks, "
        f"speed={config.speed}, "
        f"listening on http://{args.host}:{args.port}",
        flush=True,
    )
    try:
        app = create_sim_app(config)
    except ImportError as exc:  # --kv-events-endpoint without pyzmq/msgpack
        print(f"cachescout sim-engine: {exc} (install cachescout[kvevents])")
        return 2
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0
