"""`cachescout replay`: policies side by side on a workload preset or a trace, in virtual time.

Why a CLI of its own: "does agent foreknowledge pay on *my* traffic?" must be answerable without a
GPU. The command generates (or loads) one request stream, runs every chosen policy on the same
simulated cache at each capacity, and writes report.md, report.json and PNG plots to --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from proxy.cachemodel.cost_model import CostModel
from proxy.replay.runner import (
    BLIND_POLICIES,
    HINT_POLICIES,
    LANE_POLICIES,
    POLICIES,
    SESSION_POLICIES,
    ReplaySettings,
    replay,
    resolve_capacity,
)
from proxy.replay.traces import FORMATS, load_trace
from proxy.replay.workloads import PRESETS, describe, generate, preset

DEFAULT_WORKLOAD_CAPACITY = "0.015,0.03,0.06"
DEFAULT_TRACE_CAPACITY = "0.01,0.05,0.1,0.25"


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--workload", choices=sorted(PRESETS), help="generated multi-agent workload preset")
    src.add_argument("--trace", metavar="FILE", help="jsonl trace file (claude-code: a session file or a folder)")
    src.add_argument(
        "--grid",
        choices=("default", "quick", "demo"),
        help="the headroom map: sweep presets × regimes (busy share, cache × running set, pauses) and "
        "write report.json (results.grid), report.md and headroom_map.png to --out (proxy/replay/grid.py)",
    )
    p.add_argument("--jobs", type=int, default=2, help="--grid: worker processes")
    p.add_argument(
        "--lane",
        default=None,
        help="--grid: the priority lanes (issue 24; docs/replay.md 'Lanes on the grid'): slack (adds "
        "scout-proxy-lane to every cell), session (closed-loop session-lane runs at busy 70-90%%), "
        "slack,session or all; default none (the grid as before)",
    )
    p.add_argument(
        "--format",
        default="auto",
        choices=("auto", *FORMATS, "claude-code"),
        help="trace format (default: detect; claude-code: one JSON session document per file, "
        "composed with --users/--window/--horizon/--seed; docs/claude-code.md)",
    )
    p.add_argument("--users", type=int, default=None, help="claude-code: files drawn (default: all)")
    p.add_argument("--window", type=float, default=1800.0, help="claude-code: users start uniformly in [0, S)")
    p.add_argument(
        "--horizon", type=float, default=7200.0, help="claude-code: drop requests arriving after S (0: keep all)"
    )
    p.add_argument(
        "--cache-only",
        action="store_true",
        help="request-granular hit rates on a bare cache, no engine timing (the shared traces' reference "
        "semantics; policies lru, belady, session-oracle, session-oracle-blind, session-pauses)",
    )
    p.add_argument(
        "--engine-preset",
        default=None,
        help="simulated engine calibration (proxy/replay/engine_presets.py), e.g. h100x8-70b; "
        "default: the CostModel defaults",
    )
    p.add_argument("--limit", type=int, default=None, help="read only the first N trace lines")
    p.add_argument(
        "--capacity",
        default=None,
        help="comma list: a share of the stream's unique blocks (0.05 or 5%%) or a block count "
        f"(default {DEFAULT_WORKLOAD_CAPACITY} for workloads, {DEFAULT_TRACE_CAPACITY} for traces)",
    )
    p.add_argument(
        "--cpu-capacity",
        default=None,
        help="host-memory (CPU offload) tier behind the GPU cache: 4x (of each GPU capacity), a share "
        "of the unique blocks (0.2 or 20%%) or a block count; default: no host tier",
    )
    p.add_argument(
        "--offload-bandwidth-gbps",
        type=float,
        default=CostModel().offload_gbps,
        help="host tier: effective CPU->GPU bandwidth in Gb/s",
    )
    p.add_argument(
        "--kv-bytes-per-token",
        type=int,
        default=CostModel().kv_bytes_per_token,
        help="KV bytes per token of the modelled model (host-tier load size)",
    )
    p.add_argument(
        "--policies",
        default=",".join(POLICIES),
        help=f"comma list from {','.join(POLICIES)} (lru and belady always run); opt-in, with a "
        f"runtime sending hints: {','.join(HINT_POLICIES)}; with the slack lane: {','.join(LANE_POLICIES)}; "
        f"the oracle keeper's decomposition: {','.join(BLIND_POLICIES)}; session references: "
        f"{','.join(SESSION_POLICIES)}",
    )
    p.add_argument("--seed", type=int, default=0, help="workload seed")
    p.add_argument("--sessions", type=int, default=None, help="workload: number of sessions")
    p.add_argument("--predictability", type=float, default=None, help="workload: supervisor predictability")
    p.add_argument("--load", type=float, default=None, help="workload: target cold-prefill load (0..)")
    p.add_argument("--latency-budget", type=float, default=2.0, help="p99 TTFT budget for req/s @ budget")
    p.add_argument(
        "--engines",
        type=int,
        default=1,
        help="parallel prefill servers sharing the cache in the TTFT model (traces from clusters)",
    )
    p.add_argument(
        "--retention-seconds",
        type=float,
        default=300.0,
        help="scout-proxy-priority: the engine's priority retention (SGLang retention_seconds)",
    )
    p.add_argument("--ttl", type=float, default=10.0, help="ttl policy: pin seconds after a tool call")
    p.add_argument(
        "--scout-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="PolicyConfig override for the scout policies (repeatable)",
    )
    p.add_argument(
        "--no-session-ids", action="store_true", help="hide session ids from the scout policies (they infer sessions)"
    )
    p.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="engine replicas behind a router, each with its own cache of --capacity blocks and its "
        "own CacheScout sidecar (default 1: the single-engine replay)",
    )
    p.add_argument(
        "--routing",
        default="session",
        choices=("round_robin", "session", "prefix"),
        help="with --replicas > 1: the router's rule (round_robin; session = consistent hash on the "
        "session id; prefix = the router's prefix index, like vllm-router cache_aware)",
    )
    p.add_argument(
        "--scale",
        default=None,
        metavar="N,N,...",
        help="learning at scale: replay at each replica count (e.g. 1,2,4,8,16) under every routing "
        "and print hit rate, gain over LRU, top-1 accuracy and R",
    )
    p.add_argument(
        "--scale-load",
        action="store_true",
        help="with --scale and --workload: N replicas get N times the sessions and concurrency "
        "(constant load per replica) instead of splitting one stream N ways",
    )
    p.add_argument(
        "--bootstrap-share",
        type=float,
        default=0.0,
        help="with --replicas/--scale: one proxy learns on the first share of the stream (0..1); every "
        "replica starts from that snapshot and the rest of the stream is measured",
    )
    p.add_argument("--out", default="replay-out", help="output directory")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-progress", action="store_true")


def parse_overrides(items: list[str]) -> dict:
    """`key=value` strings -> typed PolicyConfig overrides (int, float, bool, else str)."""
    out: dict = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--scout-set expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        low = v.lower()
        if low in ("true", "false"):
            out[k] = low == "true"
            continue
        for cast in (int, float):
            try:
                out[k] = cast(v)
                break
            except ValueError:
                continue
        else:
            out[k] = v
    return out


def _stream(args):
    if args.workload:
        over = {"seed": args.seed}
        for name in ("sessions", "predictability", "load"):
            v = getattr(args, name)
            if v is not None:
                over[name] = v
        spec = preset(args.workload, **over)
        reqs = generate(spec)
        return reqs, spec.block_size, {"workload": describe(spec, reqs)}, DEFAULT_WORKLOAD_CAPACITY
    if args.format == "claude-code":
        from proxy.replay.claude_code import load_trace_cc

        res = load_trace_cc(args.trace, args.users, args.window, args.horizon or None, args.seed)
        info = {
            "trace": args.trace,
            "format": res.format,
            "files": res.lines,
            "malformed_files": res.malformed,
            "users": args.users,
            "window_s": args.window,
            "horizon_s": args.horizon,
            "seed": args.seed,
        }
        if res.malformed_examples:
            info["malformed_examples"] = "; ".join(why for _, why in res.malformed_examples)
        if res.malformed:
            print(f"cachescout replay: {res.malformed} malformed file(s) skipped and counted", file=sys.stderr)
        return res.requests, res.block_size, info, DEFAULT_TRACE_CAPACITY
    res = load_trace(args.trace, args.format, args.limit)
    info = {"trace": args.trace, "format": res.format, "lines": res.lines, "malformed_lines": res.malformed}
    if res.malformed_examples:
        info["malformed_examples"] = "; ".join(f"line {n}: {why}" for n, why in res.malformed_examples)
    if res.malformed:
        print(f"cachescout replay: {res.malformed} malformed line(s) skipped and counted", file=sys.stderr)
    return res.requests, res.block_size, info, DEFAULT_TRACE_CAPACITY


def _replay_clipped(reqs, caps, policies, settings, progress: bool) -> dict:
    """Engine mode on Claude Code streams: a prompt longer than the cache could never run (a real
    engine rejects it), and the engine would otherwise be grown to the longest prompt (engine_run.py);
    so at each capacity a prompt is clipped to its first `capacity - 64` blocks (counted in
    `clipped_requests`), and each capacity is replayed on its own clipped stream."""
    out: dict | None = None
    for cap in caps:
        lim = max(1, int(cap) - 64)
        clipped = [
            dataclasses.replace(
                r,
                block_hashes=r.block_hashes[:lim],
                block_tokens=r.block_tokens[:lim],
                anchor_blocks=min(r.anchor_blocks, lim),
            )
            if len(r.block_hashes) > lim
            else r
            for r in reqs
        ]
        res = replay(clipped, [cap], policies, settings, progress=progress)
        res["capacities"][0]["clipped_requests"] = sum(1 for r in reqs if len(r.block_hashes) > lim)
        if out is None:
            out = res
        else:
            out["capacities"].extend(res["capacities"])
    assert out is not None
    return out


def _cost(args) -> CostModel:
    """The engine's cost model: a preset (engine_presets.py) or the defaults, with the host-tier flags."""
    base = CostModel()
    if getattr(args, "engine_preset", None):
        from proxy.replay.engine_presets import engine_preset

        base = engine_preset(args.engine_preset)
    return dataclasses.replace(
        base,
        offload_gbps=args.offload_bandwidth_gbps
        if args.offload_bandwidth_gbps != CostModel().offload_gbps
        else base.offload_gbps,
        kv_bytes_per_token=args.kv_bytes_per_token
        if args.kv_bytes_per_token != CostModel().kv_bytes_per_token
        else base.kv_bytes_per_token,
    )


def run(args: argparse.Namespace) -> int:
    if getattr(args, "lane", None) and not getattr(args, "grid", None):
        print("cachescout replay: --lane needs --grid (or use --policies scout-proxy-lane)", file=sys.stderr)
        return 2
    if getattr(args, "grid", None):
        from proxy.replay.grid import run_cli
        from proxy.settings import SettingsError, load_settings

        try:
            proxy_settings = load_settings()
        except SettingsError as exc:
            print(f"cachescout replay: {exc}", file=sys.stderr)
            return 2
        return run_cli(args, proxy_settings)
    try:
        overrides = parse_overrides(args.scout_set)
        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        known = POLICIES + HINT_POLICIES + LANE_POLICIES + BLIND_POLICIES + SESSION_POLICIES
        if args.cache_only:
            from proxy.replay.cache_only import CACHE_ONLY_POLICIES

            known = tuple(CACHE_ONLY_POLICIES)  # type: ignore[assignment]
        unknown = [p for p in policies if p not in known]
        if unknown:
            raise ValueError(f"unknown policies {unknown}; choose from {list(known)}")
        reqs, block_size, source, default_caps = _stream(args)
        if not reqs:
            raise ValueError("the stream has no requests")
        caps = [resolve_capacity(c, reqs) for c in (args.capacity or default_caps).split(",") if c.strip()]
        from proxy.core.config import PolicyConfig

        PolicyConfig().with_overrides(**overrides)  # unknown names fail here, not mid-replay
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"cachescout replay: {exc}", file=sys.stderr)
        return 2
    if args.cache_only:
        from proxy.replay.cache_only import run_cache_only

        return run_cache_only(reqs, caps, policies, source, args)
    from proxy.settings import SettingsError, load_settings

    try:
        proxy_settings = load_settings()  # the CACHESCOUT_* settings `cachescout serve` would use
    except SettingsError as exc:
        print(f"cachescout replay: {exc}", file=sys.stderr)
        return 2
    settings = ReplaySettings(
        block_size=block_size,
        latency_budget_s=args.latency_budget,
        ttl_s=args.ttl,
        scout_overrides=overrides,
        proxy_settings=proxy_settings,
        use_sessions=not args.no_session_ids,
        engines=args.engines,
        retention_s=args.retention_seconds,
        cost=_cost(args),
        cpu_capacity=args.cpu_capacity,
    )
    if args.replicas > 1 or args.scale or args.bootstrap_share:
        from proxy.replay.fleet_report import run_fleet

        return run_fleet(args, reqs, caps, policies, settings)
    t0 = time.perf_counter()
    if args.format == "claude-code":
        results = _replay_clipped(reqs, caps, policies, settings, progress=not args.no_progress)
    else:
        results = replay(reqs, caps, policies, settings, progress=not args.no_progress)
    meta = {
        "title": args.workload or args.trace,
        "source": source,
        "settings": {
            "capacities": caps,
            "latency_budget_s": args.latency_budget,
            "ttl_s": args.ttl,
            "engines": args.engines,
            "retention_s": args.retention_seconds,
            "scout_overrides": overrides,
            "session_ids": not args.no_session_ids,
            "block_size": block_size,
            "seed": args.seed,
            "cpu_capacity": args.cpu_capacity,
            "offload_gbps": args.offload_bandwidth_gbps,
        },
        "elapsed_s": round(time.perf_counter() - t0, 3),
    }
    from proxy.replay.report import write_report

    paths = write_report(results, meta, args.out, with_plots=not args.no_plots)
    for row in results["capacities"]:
        tier = row.get("cpu_capacity_blocks") or 0
        print(f"capacity {row['capacity_blocks']} blocks" + (f", host tier {tier} blocks" if tier else ""))
        for name, s in row["policies"].items():
            gap = s.get("ttft_gap_closed" if tier else "gap_closed")
            what = "TTFT gap" if tier else "gap"
            g = "" if gap is None or name in ("lru", "belady") else f"  {what} closed {100 * gap:6.1f}%"
            load = f"  load {s['host_load_rate']:.4f}" if tier else ""
            res = s.get("ttft_resume_mean_s")
            r = f"  resume ttft {res:.4f}s" if res is not None else ""
            print(f"  {name:<22} hit {s['hit_rate']:.4f}{load}  ttft {s['ttft_mean_s']:.4f}s{r}{g}")
    print(f"report: {paths['md']}")
    return 0
