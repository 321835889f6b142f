"""Check 7: the slack lane on a real vLLM started with `--scheduling-policy priority` (run.sh adds
the flag when check 7 runs alone: `CACHESCOUT_E2E_CHECKS=7`).

Judged:
- the proxy's adapter found the policy (vLLM dev mode's `/server_info`: run.sh sets
  VLLM_SERVER_DEV_MODE=1) and sends actions at the lowest priority (`/debug/engine` →
  `scheduling.lane_priority` = 2^30, capability `priority_scheduling`);
- vLLM accepted those actions: the policy proxy's warmups/touches ended `ok`, none `error`
  (a refused `priority` would be a 400 → `error`);
- tool resumes are still warmed: check 4's tool pause, judged the same way, through the lane;
- no client request failed.
Reported, not judged (a shared 2-core CPU box): client latency through the policy proxy vs a
`--no-policy` proxy on the same vLLM (the same proxy hop on both sides, never direct), on check 6's
overloaded-cache workload, interleaved in pairs P N / N P / P N with the prefix cache reset before
each run; the mean paired difference with two standard errors of the pair spread.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from check_engine import check_tool_pause
from check_overload import NAMES, _run, _schedule, _summary
from vclient import labelled, labelled_delta, reset_prefix_cache
from workload import make_agent

LANE_LOWEST = 1 << 30  # proxy.engines.base.LANE_LOWEST (the slack lane's priority on vLLM)
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_plain_proxy(vllm: str, out: Path) -> tuple[subprocess.Popen, str]:
    """A `--no-policy` proxy on the same vLLM: the control side of the pairs (same hop)."""
    port = _free_port()
    env = {
        **os.environ,
        "CACHESCOUT_UPSTREAM_URL": vllm,
        "CACHESCOUT_HOST": "127.0.0.1",
        "CACHESCOUT_PORT": str(port),
        "PYTHONPATH": str(REPO),
    }
    log = (out / "proxy-no-policy.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "serve", "--no-policy"],
        env=env,
        cwd=str(REPO),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"--no-policy proxy exited ({proc.returncode}); log {out / 'proxy-no-policy.log'}")
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    _stop(proc)
    raise RuntimeError("--no-policy proxy not ready after 60 s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: this process group only
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        proc.kill()


def _engine_info(ctx) -> dict:
    headers = {"authorization": f"Bearer {ctx.admin_token}"} if ctx.admin_token else {}
    r = ctx.client.get(ctx.proxy + "/debug/engine", headers=headers)
    return r.json() if r.status_code == 200 else {}


def check_priority(ctx, pairs: int = 3, sessions: int = 8, turns: int = 6, concurrency: int = 4) -> tuple[bool, str]:
    info = _engine_info(ctx)
    sched = info.get("scheduling") or {}
    lane = "priority_scheduling" in (info.get("capabilities") or []) and sched.get("lane_priority") == LANE_LOWEST
    ctx.log(f"  proxy's engine scheduling: {sched}")
    if not lane:
        return False, (
            f"the proxy did not find vLLM's priority policy ({sched or 'no /debug/engine'}): start vLLM with "
            "--scheduling-policy priority and VLLM_SERVER_DEV_MODE=1 (run.sh does, for CACHESCOUT_E2E_CHECKS=7)"
        )
    a0 = labelled(ctx.client, ctx.proxy, "cachescout_actions_total")
    tool_ok, tool_detail = check_tool_pause(ctx)
    ctx.log(f"  tool pause through the slack lane: {'ok' if tool_ok else 'NOT warmed'}: {tool_detail}")
    agents = [make_agent(n, words=330) for n in NAMES]
    plan = _schedule(sessions, turns, seed=13)
    plain, plain_url = _start_plain_proxy(ctx.vllm, ctx.out)
    per_run: dict[str, list[dict]] = {"policy": [], "no_policy": []}
    try:
        for rep in range(pairs):
            order = (("policy", ctx.proxy), ("no_policy", plain_url))
            for name, base in order if rep % 2 == 0 else order[::-1]:
                reset_prefix_cache(ctx.client, ctx.vllm)
                s = _summary(asyncio.run(_run(base, ctx.model, agents, plan, concurrency, f"{name}{rep}")))
                ctx.log(
                    f"  pair {rep + 1} {name}: mean latency {s['latency_mean_ms']:.0f} ms, mean TTFT "
                    f"{s['ttft_mean_ms']:.0f} ms, hit {s['hit_ratio']:.1%}, errors {s['errors']}"
                )
                per_run[name].append(s)
    finally:
        _stop(plain)
    acts = labelled_delta(labelled(ctx.client, ctx.proxy, "cachescout_actions_total"), a0, ("kind", "outcome"))
    ok_actions = sum(v for k, v in acts.items() if k.split("/")[-1] == "ok")  # keys "kind/outcome"
    err_actions = sum(v for k, v in acts.items() if k.split("/")[-1] == "error")

    def paired(key: str) -> tuple[float, float]:
        d = [p[key] - n[key] for p, n in zip(per_run["policy"], per_run["no_policy"], strict=True)]
        se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
        return statistics.fmean(d), 2 * se

    lat, lat2se = paired("latency_mean_ms")
    ttft, ttft2se = paired("ttft_mean_ms")
    hit, hit2se = paired("hit_ratio")
    errors = sum(r["errors"] for runs in per_run.values() for r in runs)
    ctx.notes["priority"] = {
        "scheduling": sched,
        "actions": acts,
        "per_run": per_run,
        "paired_latency_ms": [lat, lat2se],
        "paired_ttft_ms": [ttft, ttft2se],
        "paired_hit": [hit, hit2se],
        "tool_pause_ok": tool_ok,
    }
    ok = tool_ok and errors == 0 and ok_actions > 0 and err_actions == 0
    base_lat = statistics.fmean(r["latency_mean_ms"] for r in per_run["no_policy"])
    return ok, (
        f"vLLM policy {sched.get('policy')} ({sched.get('source')}), actions at priority {sched.get('lane_priority')}; "
        f"policy proxy actions {', '.join(f'{k} {v:.0f}' for k, v in sorted(acts.items())) or 'none'}; "
        f"tool resume {'warmed' if tool_ok else 'NOT warmed'}; client errors {errors}; "
        f"paired policy - no-policy over {pairs} pairs (reported, not judged): mean latency {lat:+.0f} ms "
        f"(2 SE {lat2se:.0f} ms; no-policy mean {base_lat:.0f} ms), mean TTFT {ttft:+.0f} ms (2 SE {ttft2se:.0f}), "
        f"hit ratio {hit:+.1%} (2 SE {hit2se:.1%}); {sessions} sessions x {turns} turns, {concurrency} at once"
    )
