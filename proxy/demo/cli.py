"""`cachescout demo`: the simulated engine, the proxy, and a multi-agent workload — direct vs proxied.

What it shows, honestly: the same seeded 6-agent selector group chat (tool calls, ~16 concurrent
sessions) runs twice against one simulated engine with a small prefix cache — once straight to the
engine, once through the proxy — with the engine's cache reset in between and a fresh proxy that
starts knowing nothing. The headline figure is the hit rate of the workload's *own* requests
(`cached_tokens / prompt_tokens` from the engine's usage), because the engine's counters also count
the proxy's warmups; both are printed, with what the warmups cost.

Engine and proxy are child processes bound to 127.0.0.1 on free ports, stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import statistics
import sys
import time
from typing import Any

import httpx

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


class Progress:
    """A `\\r` progress bar on a terminal; on a pipe or log file (not a TTY), one line per 10%."""

    def __init__(self, label: str, total: int, enabled: bool, tty: bool | None = None) -> None:
        self.label, self.total, self.n, self.enabled = label, max(1, total), 0, enabled
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.t0 = time.perf_counter()
        self._last = 0.0
        self._decile = 0

    def tick(self) -> None:
        self.n += 1
        now = time.perf_counter()
        if not self.enabled:
            return
        if not self.tty:
            self._decile = _line_if_decile(self.label, self.n, self.total, self._decile, now - self.t0)
        elif now - self._last > 0.1 or self.n >= self.total:
            self._last = now
            done = min(1.0, self.n / self.total)
            bar = "#" * int(30 * done) + "." * (30 - int(30 * done))
            sys.stderr.write(f"\r  {self.label:<10} [{bar}] {self.n:4d} requests  {now - self.t0:5.1f}s")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write(
                f"\r  {self.label:<10} [{'#' * 30}] {self.n:4d} requests  {time.perf_counter() - self.t0:5.1f}s\n"
            )
            sys.stderr.flush()


def _line_if_decile(label: str, n: int, total: int, printed: int, elapsed: float) -> int:
    """Print `label 30% (48/160 requests) 12.3s` when n crosses the next 10% step; returns the step."""
    decile = min(10, 10 * n // max(1, total))
    if decile > printed:
        sys.stderr.write(f"  {label:<10} {10 * decile:3d}% ({n}/{total} requests) {elapsed:5.1f}s\n")
        sys.stderr.flush()
        return decile
    return printed


class DualProgress:
    """One line for two phases running at once (a TTY); otherwise a line per phase per 10%."""

    def __init__(self, bars: dict[str, Progress], enabled: bool, tty: bool | None = None) -> None:
        self.bars = bars
        self.counts = dict.fromkeys(bars, 0)
        self.deciles = dict.fromkeys(bars, 0)
        self.total = next(iter(bars.values())).total
        self.enabled = enabled
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.t0 = time.perf_counter()
        self._last = 0.0

    def tick(self, name: str) -> None:
        self.counts[name] += 1
        self.bars[name].tick()  # sequential mode: the per-phase bar draws
        now = time.perf_counter()
        if not self.enabled:
            return
        if not self.tty:
            self.deciles[name] = _line_if_decile(name, self.counts[name], self.total, self.deciles[name], now - self.t0)
        elif now - self._last > 0.1:
            self._last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        parts = []
        for name, n in self.counts.items():
            done = min(1.0, n / self.total)
            parts.append(f"{name} [{'#' * int(20 * done)}{'.' * (20 - int(20 * done))}] {n:4d}")
        sys.stderr.write("\r  " + "   ".join(parts) + f"   {now - self.t0:5.1f}s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self._draw(time.perf_counter())
            sys.stderr.write("\n")
            sys.stderr.flush()


def _engine_counters(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    out = {"queries": 0.0, "hits": 0.0, "loaded": 0.0}
    for line in text.splitlines():
        if line.startswith("vllm:external_prefix_cache_hits_total"):
            out["loaded"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prefix_cache_queries_total"):
            out["queries"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prefix_cache_hits_total"):
            out["hits"] += float(line.rsplit(" ", 1)[1])
    return out


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    vs = sorted(values)
    return vs[min(len(vs) - 1, max(0, round(q * (len(vs) - 1))))]


def summarise(res: WorkloadResult, before: dict, after: dict, warm: dict | None) -> dict[str, Any]:
    prompt = sum(r.prompt_tokens for r in res.records)
    cached = sum(r.cached_tokens for r in res.records)
    ttfts = [r.ttft_s for r in res.records if r.ttft_s is not None]
    dq = after["queries"] - before["queries"]
    out = {
        "requests": len(res.records),
        "errors": res.errors,
        "tool_resumes": sum(r.resumed for r in res.records),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "workload_hit_rate": cached / prompt if prompt else 0.0,
        "engine_hit_rate": (after["hits"] - before["hits"]) / dq if dq else 0.0,
        "engine_prompt_tokens": dq,
        "engine_loaded_tokens": after.get("loaded", 0.0) - before.get("loaded", 0.0),
        "ttft_mean_s": statistics.fmean(ttfts) if ttfts else float("nan"),
        "ttft_p50_s": _pct(ttfts, 0.5),
        "ttft_p99_s": _pct(ttfts, 0.99),
        "turn_mean_s": statistics.fmean(res.turn_latencies) if res.turn_latencies else float("nan"),
        "wall_s": res.wall_s,
        "warm_requests": 0,
        "warm_prompt_tokens": 0,
        "warm_computed_tokens": 0,
    }
    if warm is not None:
        out.update(warm)
    return out


def format_table(d: dict, p: dict) -> str:
    def pct(x: float) -> str:
        return f"{100 * x:5.1f}%"

    def ms(x: float) -> str:
        return f"{1000 * x:7.1f} ms"

    def change(a: float, b: float) -> str:
        return f"{100 * (b - a) / a:+.1f}%" if a else "-"

    rows = [
        (
            "workload prefix hit rate (usage)",
            pct(d["workload_hit_rate"]),
            pct(p["workload_hit_rate"]),
            f"{100 * (p['workload_hit_rate'] - d['workload_hit_rate']):+.1f} pp",
        ),
        (
            "engine prefix hit rate (counters, incl. warmups)",
            pct(d["engine_hit_rate"]),
            pct(p["engine_hit_rate"]),
            f"{100 * (p['engine_hit_rate'] - d['engine_hit_rate']):+.1f} pp",
        ),
        ("mean TTFT", ms(d["ttft_mean_s"]), ms(p["ttft_mean_s"]), change(d["ttft_mean_s"], p["ttft_mean_s"])),
        ("p50 TTFT", ms(d["ttft_p50_s"]), ms(p["ttft_p50_s"]), change(d["ttft_p50_s"], p["ttft_p50_s"])),
        ("p99 TTFT", ms(d["ttft_p99_s"]), ms(p["ttft_p99_s"]), change(d["ttft_p99_s"], p["ttft_p99_s"])),
        (
            "mean per-turn latency",
            ms(d["turn_mean_s"]),
            ms(p["turn_mean_s"]),
            change(d["turn_mean_s"], p["turn_mean_s"]),
        ),
        *(
            [
                (
                    "host-tier tokens loaded (engine)",
                    f"{d.get('engine_loaded_tokens', 0):,.0f}",
                    f"{p.get('engine_loaded_tokens', 0):,.0f}",
                    "",
                )
            ]
            if d.get("engine_loaded_tokens") or p.get("engine_loaded_tokens")
            else []
        ),
        (
            "client requests (tool resumes)",
            f"{d['requests']} ({d['tool_resumes']})",
            f"{p['requests']} ({p['tool_resumes']})",
            "",
        ),
        ("client prompt tokens", f"{d['prompt_tokens']:,}", f"{p['prompt_tokens']:,}", ""),
        ("warmup/touch requests", "0", f"{p['warm_requests']:,}", ""),
        (
            "warmup prompt tokens sent",
            "0",
            f"{p['warm_prompt_tokens']:,}",
            f"{100 * p['warm_prompt_tokens'] / max(1, p['prompt_tokens']):.1f}% of client",
        ),
        (
            "warmup tokens prefilled (cost)",
            "0",
            f"{p['warm_computed_tokens']:,}",
            f"{100 * p['warm_computed_tokens'] / max(1, p['prompt_tokens']):.1f}% of client",
        ),
        ("errors", str(d["errors"]), str(p["errors"]), ""),
        ("wall time", f"{d['wall_s']:.1f} s", f"{p['wall_s']:.1f} s", ""),
    ]
    w0 = max(len(r[0]) for r in rows)
    lines = [f"{'':<{w0}}  {'direct':>14}  {'via proxy':>14}  change", "-" * (w0 + 46)]
    lines += [f"{a:<{w0}}  {b:>14}  {c:>14}  {e}" for a, b, c, e in rows]
    return "\n".join(lines)


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
            before = _engine_counters(engine)
            res = await run_workload(url, spec, model=model, tick=lambda: both.tick(name))
            return res, before, _engine_counters(engine)

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
