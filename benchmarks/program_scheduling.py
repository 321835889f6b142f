"""CacheScout's session lane vs vllm-router's program scheduling, side by side on real sockets.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/program_scheduling.py               # all arms, 3 reps
    PYTHONPATH=$PWD .venv/bin/python benchmarks/program_scheduling.py --reps 5 --arms router router+ps lane-continue

The same agent workload (`cachescout demo`'s group chat: sessions of several calls, tool pauses
between a tool call and its resume) goes through each arm, on loopback, against simulated engines
(`cachescout sim-engine`, one per arm, behind its own `vllm-router` 0.1.17):

- `router`: vllm-router (`consistent_hash` on `X-Session-ID`) → FCFS engine. The baseline.
- `router+ps`: the same with `--enable-program-scheduling` and no config (its defaults).
- `router+ps-tuned`: `--program-scheduling-config-json` per its docs/program_scheduling.md:
  `global_queue: true` (recommended), `token_capacity_per_target` = the engine's KV tokens, the
  prefill/decode cost models calibrated to the simulator's cost model at this `--speed`, and a
  20-sample statistics window (its default of 100 would keep Progress-TTL at 0 for most of a run).
- `scout`: `cachescout serve` (session lane off) → vllm-router → FCFS engine: the proxy hop and its
  warmups alone, the control for the lane arms.
- `lane-continue`, `lane-las`: `cachescout serve --session-priority continue|las` → vllm-router →
  engine with `--scheduling-policy priority`.
- `lane+ps`: `cachescout serve --session-priority continue` → vllm-router with the tuned program
  scheduling → priority engine (both together).

Every request carries `X-Session-ID` and the canonical program identity
`vllm_xargs.agentic_context` (`program_id` = `session_id` = the session, `step_id`), in every arm,
so the workload is byte-for-byte the same; only the program-scheduling arms read the latter.

Method: every arm's fleet is started once, then repetitions run one arm at a time, the arms in a
rotated order per repetition (interleaved), each repetition with its own seed shared by all arms
(paired; a new seed means new prompts, so nothing cached by an earlier repetition hits). Repetition
0 is a warm-up and is not counted (the router's statistics windows and the proxy's scrapers start
cold). Figures per arm: session completion time (first call to last answer, mean over sessions),
TTFT mean over all calls and over tool resumes, hit rate (`cached_tokens / prompt_tokens` from the
engine's usage), each the mean over repetitions ± 2 SE, and the paired change against `router`.
Processes are children stopped by PID (proxy/harness/child_process.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from proxy.harness.child_process import child_on_free_port, child_process, free_port, sim_proxy_command
from proxy.harness.router_fleet import MODEL, FleetConfig, _engine_cmd, _enter_all, find_router, router_cmd
from proxy.harness.workload import DemoSpec, WorkloadResult, run_workload

ARMS = ("router", "router+ps", "router+ps-tuned", "scout", "lane-continue", "lane-las", "lane+ps")
START_TIMEOUT_S = 180.0


@dataclass(frozen=True, slots=True)
class Arm:
    name: str
    program_scheduling: str  # "" | "defaults" | "tuned"
    lane: str | None  # None: no CacheScout; "off" | "continue" | "las"

    @property
    def priority_engine(self) -> bool:
        return self.lane in ("continue", "las")


def arm(name: str) -> Arm:
    ps = {"router+ps": "defaults", "router+ps-tuned": "tuned", "lane+ps": "tuned"}.get(name, "")
    lane = {"scout": "off", "lane-continue": "continue", "lane-las": "las", "lane+ps": "continue"}.get(name)
    if name not in ARMS:
        raise ValueError(f"unknown arm {name!r}; choose from {ARMS}")
    return Arm(name, ps, lane)


def tuned_config(cfg: FleetConfig, step_base_s: float = 0.006, decode_seq_s: float = 60e-6) -> dict[str, Any]:
    """vllm-router docs/program_scheduling.md: global_queue true, token capacity per rank, and the
    cost models recalibrated to the backend (here the simulator's cost model,
    proxy/cachemodel/cost_model.py, in wall-clock seconds at `--speed`)."""
    s = cfg.speed if cfg.speed > 0 else 1.0
    return {
        "program_scheduling_enable_key": "vllm_xargs.agentic_context",
        "global_queue": True,
        "resume_order": "mru",
        "token_capacity_per_target": cfg.cache_blocks * 16,
        "metrics_interval_seconds": 0.5,
        "stats_window_size": 20,
        "prefill_cost_model": {
            "intercept_seconds": step_base_s / s,
            "linear_seconds_per_1k_tokens": 1000.0 / cfg.prefill_tps / s,
            "quadratic_seconds_per_1k_tokens_squared": 2.4e-9 * 1e6 / s,
            "decode_throughput_alpha": 0.15,
        },
        "decode_throughput_model": {
            "fixed_step_seconds": step_base_s / s,
            "batch_step_seconds_per_request": decode_seq_s / s,
            "context_step_seconds_per_token": 1e-12,
        },
    }


def start_all(
    arms: list[Arm], cfg: FleetConfig, router: str, stack: contextlib.ExitStack
) -> tuple[dict[str, str], dict[str, str]]:
    """Start every arm's engine, then routers, then proxies (each layer at once); (client URL, router
    URL) per arm."""
    engines: dict[str, str] = {}
    starts = []
    for a in arms:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = _engine_cmd(cfg, port, None)
        if a.priority_engine:
            cmd += ["--scheduling-policy", "priority"]
        starts.append(child_process(cmd, url + "/health", timeout=START_TIMEOUT_S))
        engines[a.name] = url
    _enter_all(stack, starts)

    def start_router(a: Arm) -> contextlib.AbstractContextManager[tuple[Any, int]]:
        def make(port: int) -> tuple[list[str], str]:
            cmd = router_cmd(router, port, [engines[a.name]], "consistent_hash")
            if a.program_scheduling:
                cmd += ["--enable-program-scheduling"]
            if a.program_scheduling == "tuned":
                cmd += ["--program-scheduling-config-json", json.dumps(tuned_config(cfg), separators=(",", ":"))]
            return cmd, f"http://127.0.0.1:{port}/readiness"

        return child_on_free_port(make, timeout=START_TIMEOUT_S)

    started = _enter_all(stack, [start_router(a) for a in arms])
    routers = {a.name: f"http://127.0.0.1:{port}" for a, (_, port) in zip(arms, started, strict=True)}
    fronts = dict(routers)
    starts = []
    env = {
        "CACHESCOUT_ADMIN_TOKEN": os.urandom(16).hex(),
        "CACHESCOUT_POLICY_OVERRIDES": json.dumps({"top_k": 1, "sweep_top_n": 0}),
        "CACHESCOUT_POLICY_ENABLED": "true",
    }
    for a in arms:
        if a.lane is None:
            continue
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        # in front of a router the adapter cannot read the engine's scheduling policy (the router's
        # /metrics is its own): the operator says it, as docs/live.md "Priority lanes" documents
        sets = (f"session_priority={a.lane}",) + (("engine_priority_scheduling=on",) if a.priority_engine else ())
        cmd = sim_proxy_command(sys.executable, port, routers[a.name], sets)
        starts.append(child_process(cmd, url + "/livez", env=env, timeout=START_TIMEOUT_S))
        fronts[a.name] = url
    _enter_all(stack, starts)
    return fronts, routers


def _find(obj: Any, key: str) -> Any:
    """The first value under `key` anywhere in a JSON document (None if absent)."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        obj = list(obj.values())
    if isinstance(obj, list):
        for v in obj:
            found = _find(v, key)
            if found is not None:
                return found
    return None


def diagnostics(router_url: str) -> dict[str, float]:
    """vllm-router's own view after a run (`GET /scheduling/diagnostics`): how long requests waited in
    its RequestPool and the Progress-TTL it fitted (0 = a program pauses as soon as a call ends)."""
    try:
        doc = httpx.get(router_url + "/scheduling/diagnostics", timeout=10).json()
    except (httpx.HTTPError, ValueError):
        return {}
    rolling = _find(doc, "rolling") or {}
    out = {}
    for key in ("avg_router_queue_seconds", "fitted_acting_ttl_seconds"):
        if isinstance(rolling.get(key), int | float):
            out["router_" + key] = float(rolling[key])
    return out


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def figures(res: WorkloadResult) -> dict[str, float]:
    recs = res.records
    prompt = sum(r.prompt_tokens for r in recs)
    return {
        "session_s": _mean(res.session_spans),
        "ttft_s": _mean([r.ttft_s for r in recs if r.ttft_s is not None]),
        "ttft_resume_s": _mean([r.ttft_s for r in recs if r.resumed and r.ttft_s is not None]),
        "ttft_first_s": _mean([r.ttft_s for r in recs if r.ttft_s is not None and not r.resumed]),
        "hit_rate": sum(r.cached_tokens for r in recs) / prompt if prompt else 0.0,
        "requests": float(len(recs)),
        "sessions_done": float(len(res.session_spans)),
        "errors": float(res.errors),
        "wall_s": res.wall_s,
    }


def mean_2se(xs: list[float]) -> tuple[float, float]:
    m = statistics.fmean(xs)
    return m, (2 * statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else float("nan"))


def spec_for(args: argparse.Namespace, seed: int) -> DemoSpec:
    return DemoSpec(
        agents=6,
        tool_agents=3,
        sessions=args.sessions,
        concurrency=args.concurrency,
        steps=(3, 4),
        predictability=0.9,
        anchor_words=(300, 420),
        task_words=(30, 60),
        tool_result_words=(30, 60),
        tool_seconds=(0.3, 0.8),
        think_seconds=0.05,
        max_tokens=48,
        max_tool_rounds=1,
        seed=seed,
        session_header=True,
        agentic_context=True,
        arrival_rate=args.arrival_rate,
    )


METRICS = (("session_s", "session completion (s)"), ("ttft_s", "TTFT all (ms)"), ("ttft_resume_s", "TTFT resumes (ms)"))


def report(rows: list[dict[str, Any]], arms: list[str], baseline: str) -> str:
    out = [
        "| arm | session completion s | Δ vs router | TTFT all ms | Δ | TTFT resumes ms | Δ | "
        "TTFT first calls ms | hit rate | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    base = {r["rep"]: r for r in rows if r["arm"] == baseline}
    for name in arms:
        rs = [r for r in rows if r["arm"] == name]
        cells = [name]
        for key, _ in METRICS:
            scale = 1.0 if key == "session_s" else 1000.0
            m, se = mean_2se([scale * r[key] for r in rs])
            cells.append(f"{m:.2f} ± {se:.2f}" if scale == 1.0 else f"{m:.0f} ± {se:.0f}")
            if name == baseline or not base:
                cells.append("—")
            else:
                d, dse = mean_2se([100.0 * (r[key] / base[r["rep"]][key] - 1.0) for r in rs])
                cells.append(f"{d:+.1f}% ± {dse:.1f}")
        m, se = mean_2se([1000.0 * r["ttft_first_s"] for r in rs])
        cells.append(f"{m:.0f} ± {se:.0f}")
        m, se = mean_2se([r["hit_rate"] for r in rs])
        cells.append(f"{m:.3f} ± {se:.3f}")
        cells.append(str(int(sum(r["errors"] for r in rs))))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", nargs="+", default=list(ARMS))
    ap.add_argument("--reps", type=int, default=3, help="counted repetitions (plus one warm-up)")
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--concurrency", type=int, default=6, help="closed loop: sessions at once")
    ap.add_argument(
        "--arrival-rate", type=float, default=0.0, help="> 0: open loop, Poisson session arrivals per s (seeded)"
    )
    ap.add_argument("--cache-blocks", type=int, default=160, help="engine KV blocks of 16 tokens")
    ap.add_argument("--prefill-tps", type=float, default=4000.0)
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    router, why = find_router()
    if router is None:
        print(f"program_scheduling: {why}", file=sys.stderr)
        return 2
    arms = [arm(n) for n in args.arms]
    cfg = FleetConfig(
        replicas=1, cache_blocks=args.cache_blocks, prefill_tps=args.prefill_tps, speed=args.speed, output_tokens=8
    )
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        fronts, routers = start_all(arms, cfg, router, stack)
        print(f"started {len(arms)} arms in {time.perf_counter() - t0:.0f}s", flush=True)
        for rep in range(args.reps + 1):
            order = arms[rep % len(arms) :] + arms[: rep % len(arms)]
            for a in order:
                spec = spec_for(args, args.seed + rep)
                if rep == 0:  # the warm-up: enough calls to fill the router's 20-sample windows
                    spec = replace(spec, sessions=args.concurrency)
                res = asyncio.run(run_workload(fronts[a.name], spec, model=MODEL))
                f = figures(res)
                if a.program_scheduling:
                    f.update(diagnostics(routers[a.name]))
                print(
                    f"rep {rep}{' (warm-up)' if rep == 0 else ''} {a.name:<16} session {f['session_s']:.2f}s "
                    f"TTFT {1000 * f['ttft_s']:.0f} ms resumes {1000 * f['ttft_resume_s']:.0f} ms "
                    f"hit {f['hit_rate']:.3f} requests {int(f['requests'])} errors {int(f['errors'])} "
                    f"wall {f['wall_s']:.1f}s"
                    + (
                        f" router queue {1000 * f['router_avg_router_queue_seconds']:.0f} ms"
                        f" fitted TTL {f.get('router_fitted_acting_ttl_seconds', float('nan')):.2f}s"
                        if "router_avg_router_queue_seconds" in f
                        else ""
                    ),
                    flush=True,
                )
                if rep > 0:
                    rows.append({"arm": a.name, "rep": rep, **f})
    print(f"\ntotal {time.perf_counter() - t0:.0f}s\n")
    print(report(rows, [a.name for a in arms], arms[0].name))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
