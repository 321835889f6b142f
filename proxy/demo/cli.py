"""`cachescout demo`: the simulated engine, the proxy, and a multi-agent workload — direct vs proxied.

What it shows, honestly: the same seeded 6-agent selector group chat (tool calls, ~16 concurrent
sessions) runs twice against one simulated engine with a small prefix cache — once straight to the
engine, once through the proxy — with the engine's cache reset in between and a fresh proxy that
starts knowing nothing. The headline figure is the hit rate of the workload's *own* requests
(`cached_tokens / prompt_tokens` from the engine's usage), because the engine's counters also count
the proxy's warmups; both are printed, with what the warmups cost.

Engine and proxy are child processes bound to 127.0.0.1 on free ports, stopped by PID at the end.
This module runs the phases; `progress.py` draws the progress lines, `report.py` computes the
figures and formats the table, `workload.py` is the workload itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import sys
import time
from typing import Any

import httpx

from proxy.demo.progress import DualProgress, Progress
from proxy.demo.report import engine_counters, format_table, summarise
from proxy.demo.workload import DemoSpec, WorkloadResult, expected_requests, run_workload
from proxy.harness.child_process import child_process, free_port, sim_proxy_command

PHASES = ("direct", "via proxy")
# Policy settings of the demo's proxy (each one and why: docs/live.md). Everything else is the
# default: the warmup budget follows the engine's measured prefill rate (warmup_prefill_share).
DEMO_POLICY: dict[str, float] = {
    "top_k": 1,  # warm only the top-1 successor: fan-out warms mostly went unused here
    "sweep_top_n": 0,  # no survival sweeps: their touches/warms cost more than they saved here
}
# Proxy Settings the demo changes (besides engine=sim and faster scrape/plan ticks): none.
DEMO_PROXY_SETTINGS: tuple[str, ...] = ()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", type=int, default=16, help="sessions (tasks) per run")
    parser.add_argument("--concurrency", type=int, default=4, help="sessions running at once")
    parser.add_argument("--agents", type=int, default=8, help="agents in the group chat")
    parser.add_argument(
        "--predictability",
        type=float,
        default=0.9,
        help="P(the supervisor follows its script); 0 = random speaker order",
    )
    parser.add_argument("--cache-blocks", type=int, default=480, help="engine prefix cache size in 16-token blocks")
    parser.add_argument(
        "--prefill-tps",
        type=float,
        default=3000.0,
        help="simulated prefill speed, tokens/s (roughly a 70B-class model on one GPU)",
    )
    parser.add_argument("--speed", type=float, default=1.0, help="simulated seconds per wall second")
    parser.add_argument("--output-tokens", type=int, default=8, help="typical answer length of the engine")
    parser.add_argument("--max-tokens", type=int, default=64, help="max_tokens of the workload's requests")
    parser.add_argument(
        "--tool-seconds",
        type=float,
        nargs=2,
        default=(0.3, 1.5),
        metavar=("MIN", "MAX"),
        help="how long a tool call runs before the agent resumes",
    )
    parser.add_argument(
        "--gap-seconds",
        type=float,
        default=0.25,
        help="orchestration gap between turns (the supervisor choosing the next speaker)",
    )
    parser.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="PolicyConfig override for the proxy (repeatable), e.g. --policy cooldown_s=1",
    )
    parser.add_argument(
        "--proxy-set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="proxy Settings field (repeatable), passed to `cachescout serve --set`",
    )
    parser.add_argument(
        "--passthrough",
        action="store_true",
        help="run the proxy with the policy off: measures the cost of the extra hop alone",
    )
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="one engine: direct run, cache reset, proxied run (default: both at once on two "
        "identical engines, so machine load affects both alike)",
    )
    parser.add_argument(
        "--eviction",
        choices=("lru", "priority"),
        default="lru",
        help="engine eviction: lru (vLLM) or priority (SGLang --radix-eviction-policy priority)",
    )
    parser.add_argument(
        "--tiered",
        action="store_true",
        help="give the engines a host-memory (CPU offload) tier of 4x the cache (--cpu-blocks)",
    )
    parser.add_argument(
        "--cpu-blocks",
        type=int,
        default=None,
        help="host-memory tier size in blocks (implies --tiered; default with --tiered: 4x --cache-blocks)",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", dest="json_out", default=None, help="also write the figures to this JSON file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Engine and proxy run as child processes (each its own interpreter, as in production); the
    workload runs here. An in-thread proxy would share this process's GIL with the load generator and
    the engine, and the demo would measure Python contention instead of cache effects."""
    spec = DemoSpec(
        agents=args.agents,
        sessions=args.sessions,
        concurrency=args.concurrency,
        predictability=args.predictability,
        seed=args.seed,
        max_tokens=args.max_tokens,
        tool_seconds=tuple(args.tool_seconds),
        think_seconds=args.gap_seconds,
    )
    overrides = dict(DEMO_POLICY)
    for item in args.policy:
        name, _, value = item.partition("=")
        overrides[name.strip()] = float(value)
    show = not args.no_progress
    total = expected_requests(spec)
    model = "sim-llama-3.1-8b"
    cpu_blocks = args.cpu_blocks if args.cpu_blocks is not None else (4 * args.cache_blocks if args.tiered else 0)
    print(
        f"cachescout demo: {spec.agents}-agent selector group chat, {spec.sessions} sessions "
        f"({spec.concurrency} at once, predictability {spec.predictability}); simulated engine with "
        f"{args.cache_blocks} x 16-token cache blocks, prefill {args.prefill_tps:.0f} tok/s"
        + (f", host tier {cpu_blocks} blocks" if cpu_blocks else ""),
        file=sys.stderr,
    )
    py = sys.executable
    admin = secrets.token_hex(16)
    auth = {"authorization": f"Bearer {admin}"}

    def engine_cmd(port: int) -> list[str]:
        return [
            py,
            "-m",
            "proxy.cli",
            "sim-engine",
            "--port",
            str(port),
            "--model",
            model,
            "--capacity-blocks",
            str(args.cache_blocks),
            "--prefill-tokens-per-s",
            str(args.prefill_tps),
            "--speed",
            str(args.speed),
            "--output-tokens",
            str(args.output_tokens),
            "--seed",
            str(args.seed),
            "--tool-call-share",
            "0.5",
            "--eviction",
            args.eviction,
            "--log-level",
            "warning",
            "--cpu-blocks",
            str(cpu_blocks),
        ]

    def proxy_cmd(port: int, upstream: str) -> list[str]:
        return sim_proxy_command(py, port, upstream, (*DEMO_PROXY_SETTINGS, *args.proxy_set))

    proxy_env = {
        "CACHESCOUT_ADMIN_TOKEN": admin,
        "CACHESCOUT_POLICY_OVERRIDES": json.dumps(overrides),
        "CACHESCOUT_POLICY_ENABLED": "false" if args.passthrough else "true",
    }
    e1, e2, pp = free_port(), free_port(), free_port()
    url1, url2, purl = (f"http://127.0.0.1:{e1}", f"http://127.0.0.1:{e2}", f"http://127.0.0.1:{pp}")
    with contextlib.ExitStack() as stack:
        stack.enter_context(child_process(engine_cmd(e1), url1 + "/health"))
        if args.sequential:
            # The brief's order: direct, reset the engine's cache, then through a fresh proxy.
            url2 = url1
        else:
            stack.enter_context(child_process(engine_cmd(e2), url2 + "/health"))
        stack.enter_context(child_process(proxy_cmd(pp, url2), purl + "/livez", env=proxy_env))
        bars = {name: Progress(name, total, show and args.sequential) for name in PHASES}
        both = DualProgress(bars, show and not args.sequential)

        async def phase(name: str, url: str, engine: str) -> tuple[WorkloadResult, dict, dict]:
            before = engine_counters(engine)
            res = await run_workload(url, spec, model=model, tick=lambda: both.tick(name))
            return res, before, engine_counters(engine)

        if args.sequential:
            direct = asyncio.run(phase(PHASES[0], url1, url1))
            bars[PHASES[0]].close()
            httpx.post(url1 + "/reset_prefix_cache", timeout=10).raise_for_status()
            proxied = asyncio.run(phase(PHASES[1], purl, url1))
            bars[PHASES[1]].close()
        else:
            # Both at once, on two identical engines: the shared machine's load hits both runs alike.
            async def run_both():
                return await asyncio.gather(phase(PHASES[0], url1, url1), phase(PHASES[1], purl, url2))

            direct, proxied = asyncio.run(run_both())
            both.close()
        time.sleep(0.3)  # let the last planned actions finish
        eng: dict[str, Any]  # the proxy's /debug/engine and /debug/state answers (JSON objects)
        state: dict[str, Any]
        if args.passthrough:
            eng = {
                "executor": dict.fromkeys(
                    (
                        "ok",
                        "error",
                        "dropped_stale",
                        "dropped_busy",
                        "dropped_full",
                        "deduped",
                        "warm_prompt_tokens",
                        "warm_computed_tokens",
                    ),
                    0,
                )
            }
            state = {
                "stats": {"actions_emitted": {}, "predictability": 0.0, "agents": 0, "top1_accuracy": 0.0},
                "observer": {"converted_tokens": 0},
            }
        else:
            eng = httpx.get(purl + "/debug/engine", headers=auth, timeout=10).json()
            state = httpx.get(purl + "/debug/state", headers=auth, timeout=10).json()
    ex, st = eng["executor"], state["stats"]
    warm = {
        "warm_requests": ex["ok"],
        "warm_prompt_tokens": ex["warm_prompt_tokens"],
        "warm_computed_tokens": ex["warm_computed_tokens"],
        "actions": {k: ex[k] for k in ("ok", "error", "dropped_stale", "dropped_busy", "dropped_full", "deduped")},
        "actions_by_reason": st["actions_emitted"],
        "predictability": round(st["predictability"], 3),
        "agents_learned": st["agents"],
        "top1_accuracy": round(st["top1_accuracy"], 3),
        "converted_tokens": state["observer"]["converted_tokens"],
        "warmup_budget": eng.get("warmup_budget") or {},
    }
    results = {"direct": summarise(*direct, None), "proxy": summarise(*proxied, warm)}
    d, p = results["direct"], results["proxy"]
    print()
    print(format_table(d, p))
    print(
        f"\nproxy learned {p['agents_learned']} agents, predictability R = {p['predictability']}, "
        f"top-1 next-agent accuracy {p['top1_accuracy']:.0%}; actions: "
        + ", ".join(f"{k} {v}" for k, v in sorted(p["actions_by_reason"].items()))
        + f"; executor outcomes {p['actions']}"
    )
    budget = p.get("warmup_budget") or {}
    if budget:
        print("warmup budget: " + ", ".join(f"{k} {v}" for k, v in budget.items()))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"args": vars(args), "direct": d, "proxy": p}, f, indent=2, default=str)
    return 0
