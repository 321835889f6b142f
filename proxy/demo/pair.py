"""One scene at one seed: two identical simulated engines, the workload straight to one and through a
fresh CacheScout proxy to the other, both at once.

Why both at once: the demo runs on shared machines; running the two sides side by side puts the
machine's load on both alike (a sequential A/B lets the load drift between them). Engines and proxy
are child processes (each its own interpreter, as in production), started together, bound to
127.0.0.1 on free ports and stopped by PID at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import httpx

from proxy.bench.claude_code_live import PlannedRequest, plan, run_live
from proxy.demo.report import engine_client_ttft, engine_counters, summarise
from proxy.demo.scenes import Scene, TraceWorkload
from proxy.harness.child_process import free_port, sim_proxy_command, stop, wait_ready
from proxy.harness.workload import RequestRecord, WorkloadResult, run_workload
from proxy.replay.claude_code import compose, load

MODEL = "sim-llama-3.1-8b"
REQUEST_LOG = 20_000  # engine request log: each client request's virtual-clock TTFT (report.engine_client_ttft)
EXECUTOR_KEYS = ("ok", "error", "dropped_stale", "dropped_busy", "dropped_full", "deduped")


@dataclass(frozen=True, slots=True)
class PairOptions:
    policy: dict[str, float]  # PolicyConfig overrides on top of the scene's
    proxy_sets: tuple[str, ...] = ()  # `cachescout serve --set` items
    passthrough: bool = False  # proxy with the policy off
    # the baseline side through the same proxy with its policy off (same processes and hops on both
    # sides, so a loaded machine's CPU wait falls on both alike; docs/results/demo-stability.md)
    baseline_hop: bool = False
    cpu_blocks_factor: float = 0.0  # host tier = factor x cache blocks (0 = none)
    admin_token: str = "demo"


def trace_sessions(trace: TraceWorkload, seed: int) -> dict[str, list[PlannedRequest]]:
    """The scene's recorded sessions composed at `seed` (the users' start offsets), as requests."""
    loaded = load(trace.path)
    comp = compose(loaded.files, users=None, window=trace.window_s, horizon=trace.horizon_s, seed=seed)
    return plan(comp, trace.max_tokens)


async def run_trace(
    url: str, trace: TraceWorkload, seed: int, *, model: str, tick: Callable[[], None]
) -> WorkloadResult:
    """A trace scene's side: the recorded sessions live (`run_live`), as a `WorkloadResult` (a
    session's span is its first send to its last answer; turns are not defined here)."""
    live = await run_live(url, trace_sessions(trace, seed), model=model, time_scale=trace.time_scale, tick=tick)
    out = WorkloadResult(errors=live.errors, wall_s=live.wall_s)
    spans: dict[str, list[float]] = {}
    for r in live.records:
        out.records.append(
            RequestRecord(
                "coding-agent",
                0,
                r.prompt_tokens,
                r.cached_tokens,
                r.ttft_s,
                r.latency_s,
                r.finish_reason,
                r.resumed,
                r.sent_at,
            )
        )
        span = spans.setdefault(r.session_id, [r.sent_at, r.sent_at + r.latency_s])
        span[0], span[1] = min(span[0], r.sent_at), max(span[1], r.sent_at + r.latency_s)
    out.session_latencies = [b - a for a, b in spans.values()]
    return out


def engine_cmd(scene: Scene, port: int, seed: int, cpu_blocks: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "proxy.cli",
        "sim-engine",
        "--port",
        str(port),
        "--model",
        MODEL,
        "--capacity-blocks",
        str(scene.cache_blocks),
        "--prefill-tokens-per-s",
        str(scene.prefill_tps),
        "--output-tokens",
        str(scene.output_tokens),
        "--max-num-seqs",
        str(scene.max_num_seqs),
        "--seed",
        str(seed),
        "--tool-call-share",
        "0.5",
        "--log-level",
        "warning",
        "--cpu-blocks",
        str(cpu_blocks),
        "--request-log",
        str(REQUEST_LOG),
        "--speed",
        f"{scene.speed:g}",
        *(["--max-model-len", str(scene.max_model_len)] if scene.max_model_len else []),
    ]


@contextlib.contextmanager
def _children(cmds: list[tuple[list[str], str, dict[str, str]]], timeout: float = 60.0) -> Iterator[None]:
    """Start every command at once, wait until each one's URL answers 200, stop all by PID on exit."""
    procs: list[subprocess.Popen] = []
    with contextlib.ExitStack() as files:
        try:
            logs = []
            for cmd, _url, env in cmds:
                log = files.enter_context(tempfile.TemporaryFile(mode="w+"))
                logs.append(log)
                procs.append(
                    subprocess.Popen(
                        cmd,
                        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        text=True,
                    )
                )
            for proc, (cmd, url, _env), log in zip(procs, cmds, logs, strict=True):
                try:
                    wait_ready(url, proc, timeout)
                except RuntimeError as exc:
                    log.seek(0)
                    raise RuntimeError(f"{exc} ({' '.join(cmd[:4])} …):\n{log.read()[-3000:]}") from None
            yield
        finally:
            for proc in procs:
                stop(proc)


def run_pair(
    scene: Scene, seed: int, opts: PairOptions, tick: Callable[[str], None] = lambda side: None
) -> dict[str, Any]:
    """Run `scene` at `seed` direct and through a fresh proxy; returns {"direct", "proxy", "state"}."""
    spec = replace(scene.spec, seed=seed)
    cpu_blocks = int(opts.cpu_blocks_factor * scene.cache_blocks)
    e1, e2, pp = free_port(), free_port(), free_port()
    url1, url2, purl = (f"http://127.0.0.1:{e1}", f"http://127.0.0.1:{e2}", f"http://127.0.0.1:{pp}")
    overrides = {**scene.policy, **opts.policy}
    proxy_env = {
        "CACHESCOUT_ADMIN_TOKEN": opts.admin_token,
        "CACHESCOUT_POLICY_OVERRIDES": json.dumps(overrides),
        "CACHESCOUT_POLICY_ENABLED": "false" if opts.passthrough else "true",
    }
    auth = {"authorization": f"Bearer {opts.admin_token}"}
    base_url = url1
    cmds = [
        (engine_cmd(scene, e1, seed, cpu_blocks), url1 + "/health", {}),
        (engine_cmd(scene, e2, seed, cpu_blocks), url2 + "/health", {}),
        (sim_proxy_command(sys.executable, pp, url2, opts.proxy_sets), purl + "/livez", proxy_env),
    ]
    if opts.baseline_hop:
        bp = free_port()
        base_url = f"http://127.0.0.1:{bp}"
        off = {**proxy_env, "CACHESCOUT_POLICY_ENABLED": "false"}
        cmds.append((sim_proxy_command(sys.executable, bp, url1, opts.proxy_sets), base_url + "/livez", off))
    with _children(cmds):

        async def side(name: str, url: str, engine: str) -> tuple[WorkloadResult, dict, dict]:
            before = engine_counters(engine)
            if scene.trace is not None:
                res = await run_trace(url, scene.trace, seed, model=MODEL, tick=lambda: tick(name))
            else:
                res = await run_workload(url, spec, model=MODEL, tick=lambda: tick(name))
            return res, before, {**engine_counters(engine), **engine_client_ttft(engine)}

        async def both() -> list[tuple[WorkloadResult, dict, dict]]:
            return list(await asyncio.gather(side("direct", base_url, url1), side("proxy", purl, url2)))

        direct, proxied = asyncio.run(both())
        time.sleep(0.3)  # let the last planned actions finish
        if opts.passthrough:
            zero = (*EXECUTOR_KEYS, "warm_prompt_tokens", "warm_computed_tokens")
            eng: dict[str, Any] = {"executor": dict.fromkeys(zero, 0)}
            state: dict[str, Any] = {"stats": {}, "observer": {}, "self_evaluation": {}}
        else:
            eng = httpx.get(purl + "/debug/engine", headers=auth, timeout=10).json()
            state = httpx.get(purl + "/debug/state", headers=auth, timeout=10).json()
    ex, st = eng["executor"], state.get("stats") or {}
    signals = (state.get("self_evaluation") or {}).get("signals") or {}
    warm = {
        "warm_requests": ex["ok"],
        "warm_prompt_tokens": ex["warm_prompt_tokens"],
        "warm_computed_tokens": ex["warm_computed_tokens"],
        "actions": {k: ex[k] for k in EXECUTOR_KEYS},
        "actions_by_reason": st.get("actions_emitted") or {},
        "actions_skipped": st.get("actions_skipped") or {},
        "signals": {
            r: {k: v for k, v in y.items() if k in ("saved_tokens", "spent_tokens", "actions", "throttled")}
            for r, y in signals.items()
        },
        "predictability": round(float(st.get("predictability") or 0.0), 3),
        "agents_learned": st.get("agents") or 0,
        "top1_accuracy": round(float(st.get("top1_accuracy") or 0.0), 3),
        "converted_tokens": (state.get("observer") or {}).get("converted_tokens", 0),
        "warmup_budget": eng.get("warmup_budget") or {},
        "agents": state.get("agents") or [],
    }
    return {"direct": summarise(*direct, None), "proxy": summarise(*proxied, warm)}
