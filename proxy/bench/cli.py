"""`cachescout bench claude-code`: real Claude Code sessions, live, straight to an engine and through the proxy.

Each arm gets its own identical simulated engine (started here on loopback), all arms at once so
the machine's load falls on them alike: `direct` (client -> engine), `proxy` (client -> `cachescout
serve` -> engine), `passthrough` (client -> a plain FastAPI+httpx pass-through -> engine: the
yardstick for the proxy's CPU). With `--verify-bytes` a recording pass-through sits between the
proxy and its engine and the run fails unless every body the client sent reached the engine
byte for byte. Reports per arm: hit rate, mean / p50 / p99 TTFT, tool-resume TTFT, errors; for the
proxy and the pass-through: CPU seconds per client request and peak RSS. How the sessions become
requests: `claude_code_live.py`; the how-to and the measured bounds: docs/claude-code-live.md.

Time scale: `--time-scale S` multiplies the trace's arrivals and think times by S; the engine then
runs at `--speed 1/S` (its modelled prefill and decode 1/S times as fast in wall time, so the
engine's load is the trace's), and the proxy's timers
(PolicyConfig's horizons, cooldowns, TTLs) are multiplied by S and its rates divided by S.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from proxy.bench.claude_code_live import plan, run_live, scaled_policy, summary
from proxy.harness.child_process import free_port, sim_proxy_command, stop, wait_ready
from proxy.replay.claude_code import compose, load

MODEL = "sim-claude-code"
ARMS = ("direct", "proxy", "passthrough")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", required=True)
    p = sub.add_parser("claude-code", help="Claude Code sessions live: direct vs through the proxy")
    p.add_argument("--trace", required=True, help="a Claude Code session file or a folder of them")
    p.add_argument("--users", type=int, default=None, help="files drawn (default all)")
    p.add_argument("--window", type=float, default=60.0, help="users' start offsets uniform over this (s)")
    p.add_argument("--horizon", type=float, default=None, help="drop requests after this (trace s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-scale", type=float, default=1.0, help="multiply arrivals and think times by this")
    p.add_argument("--max-tokens", type=int, default=32, help="cap on each request's answer length")
    p.add_argument("--arms", default="direct,proxy", help=f"comma list of {', '.join(ARMS)}")
    p.add_argument("--capacity-blocks", type=int, default=32_768, help="engine cache, 16-token blocks")
    p.add_argument("--prefill-tokens-per-s", type=float, default=15_000.0)
    p.add_argument("--max-model-len", type=int, default=524_288)
    p.add_argument("--sim-arg", action="append", default=[], help="extra `cachescout sim-engine` argument")
    p.add_argument("--policy", action="append", default=[], metavar="NAME=VALUE", help="PolicyConfig override")
    p.add_argument("--verify-bytes", action="store_true", help="record the bytes the proxy's engine receives")
    p.add_argument("--json", dest="json_out", default=None)


@dataclass
class Arm:
    name: str
    url: str  # where the client sends
    engine_url: str
    middle: subprocess.Popen | None = None  # the proxy or pass-through whose CPU/RSS is measured
    recorder_url: str | None = None


def proc_usage(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) and peak/current RSS of a process, from /proc (Linux)."""
    out = {"cpu_s": float("nan"), "rss_peak_mb": float("nan"), "rss_mb": float("nan")}
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        tck = os.sysconf("SC_CLK_TCK")
        out["cpu_s"] = (int(fields[11]) + int(fields[12])) / tck
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                out["rss_peak_mb"] = int(line.split()[1]) / 1024
            elif line.startswith("VmRSS:"):
                out["rss_mb"] = int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def engine_command(args: argparse.Namespace, port: int) -> list[str]:
    speed = 1.0 / args.time_scale if args.time_scale > 0 else 1.0
    cmd = [sys.executable, "-m", "proxy.cli", "sim-engine", "--port", str(port), "--model", MODEL]
    cmd += ["--capacity-blocks", str(args.capacity_blocks), "--max-model-len", str(args.max_model_len)]
    cmd += ["--prefill-tokens-per-s", str(args.prefill_tokens_per_s), "--speed", f"{speed:g}"]
    cmd += ["--seed", str(args.seed), "--log-level", "warning", *args.sim_arg]
    return cmd


@contextlib.contextmanager
def start_arms(args: argparse.Namespace, names: list[str], admin: str) -> Iterator[list[Arm]]:
    """Start every arm's processes at once, wait for all, stop all by PID on exit."""
    procs: list[subprocess.Popen] = []
    waits: list[tuple[str, subprocess.Popen]] = []
    arms: list[Arm] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    def spawn(cmd: list[str], ready: str, extra: dict[str, str] | None = None) -> subprocess.Popen:
        proc = subprocess.Popen(cmd, env={**env, **(extra or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        waits.append((ready, proc))
        return proc

    overrides = scaled_policy(args.time_scale)
    for item in args.policy:
        k, _, v = item.partition("=")
        overrides[k.strip()] = float(v)
    try:
        for name in names:
            ep = free_port()
            eurl = f"http://127.0.0.1:{ep}"
            spawn(engine_command(args, ep), eurl + "/health")
            if name == "direct":
                arms.append(Arm(name, eurl, eurl))
                continue
            upstream, rec_url = eurl, None
            if name == "proxy" and args.verify_bytes:
                rp = free_port()
                rec_url = f"http://127.0.0.1:{rp}"
                cmd = [sys.executable, "-m", "proxy.bench.passthrough", "--upstream", eurl, "--port", str(rp)]
                spawn([*cmd, "--record"], rec_url + "/livez")
                upstream = rec_url
            mp = free_port()
            murl = f"http://127.0.0.1:{mp}"
            if name == "proxy":
                proxy_env = {"CACHESCOUT_ADMIN_TOKEN": admin, "CACHESCOUT_POLICY_OVERRIDES": json.dumps(overrides)}
                middle = spawn(sim_proxy_command(sys.executable, mp, upstream), murl + "/livez", proxy_env)
            else:
                cmd = [sys.executable, "-m", "proxy.bench.passthrough", "--upstream", eurl, "--port", str(mp)]
                middle = spawn(cmd, murl + "/livez")
            arms.append(Arm(name, murl, eurl, middle, rec_url))
        for url, proc in waits:
            wait_ready(url, proc, 90.0)
        yield arms
    finally:
        for proc in procs:
            stop(proc)


def run(args: argparse.Namespace) -> int:
    if args.bench != "claude-code":
        return 2
    names = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in names if a not in ARMS]
    if bad or not names:
        print(f"cachescout bench: unknown arm(s) {bad}; choose from {ARMS}", file=sys.stderr)
        return 2
    loaded = load(args.trace)
    if not loaded.files:
        print(f"cachescout bench: no readable session in {args.trace}", file=sys.stderr)
        return 2
    comp = compose(loaded.files, users=args.users, window=args.window, horizon=args.horizon, seed=args.seed)
    sessions = plan(comp, args.max_tokens)
    n_req = sum(len(v) for v in sessions.values())
    print(
        f"cachescout bench claude-code: {len(comp.users)} users, {len(sessions)} sessions, {n_req} requests, "
        f"arms {','.join(names)}, time scale {args.time_scale:g}"
        + (f" ({loaded.malformed} malformed file(s): {loaded.malformed_files})" if loaded.malformed else ""),
        file=sys.stderr,
    )
    report = run_bench(args, names, sessions)
    report["draw"] = {"users": comp.users, "dropped": comp.dropped, "seed": args.seed, "window": args.window}
    print(format_report(report))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2, default=str))
    bytes_ok = report.get("bytes", {}).get("ok", True)
    errors = sum(int(a["errors"]) for a in report["arms"].values())
    return 0 if bytes_ok and errors == 0 else 1


def run_bench(args: argparse.Namespace, names: list[str], sessions: dict) -> dict[str, Any]:
    admin = secrets.token_hex(16)
    with start_arms(args, names, admin) as arms:
        before = {a.name: proc_usage(a.middle.pid) for a in arms if a.middle is not None}

        async def all_arms() -> list[Any]:
            return list(
                await asyncio.gather(
                    *(run_live(a.url, sessions, model=MODEL, time_scale=args.time_scale) for a in arms)
                )
            )

        t0 = time.perf_counter()
        results = asyncio.run(all_arms())
        wall = time.perf_counter() - t0
        report: dict[str, Any] = {"wall_s": wall, "time_scale": args.time_scale, "arms": {}}
        for arm, res in zip(arms, results, strict=True):
            s = summary(res)
            if arm.middle is not None:
                after = proc_usage(arm.middle.pid)
                cpu = after["cpu_s"] - before[arm.name]["cpu_s"]
                s["middle_cpu_s"] = cpu
                s["middle_cpu_ms_per_request"] = 1000 * cpu / max(1, s["requests"])
                s["middle_rss_peak_mb"] = after["rss_peak_mb"]
            report["arms"][arm.name] = s
            if arm.name == "proxy":
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    eng = httpx.get(
                        arm.url + "/debug/engine", headers={"authorization": f"Bearer {admin}"}, timeout=10
                    ).json()
                    s["proxy_actions"] = int((eng.get("executor") or {}).get("ok", 0))
            if arm.recorder_url is not None:
                got = httpx.get(arm.recorder_url + "/digests", timeout=30).json()["digests"]
                report["bytes"] = bytes_check(res.sent_digests, got)
    return report


def bytes_check(sent: list[str], received: list[str]) -> dict[str, Any]:
    """Every body the client sent reached the engine unchanged (the proxy's own warm/touch
    requests are extra bodies, not counted as changes)."""
    pool: dict[str, int] = {}
    for d in received:
        pool[d] = pool.get(d, 0) + 1
    missing = 0
    for d in sent:
        if pool.get(d, 0) > 0:
            pool[d] -= 1
        else:
            missing += 1
    return {"sent": len(sent), "received": len(received), "changed_or_missing": missing, "ok": missing == 0}


def format_report(report: dict[str, Any]) -> str:
    rows = [
        ("requests (tool resumes)", lambda s: f"{s['requests']} ({s['tool_resumes']})"),
        ("errors", lambda s: str(s["errors"])),
        ("prefix hit rate", lambda s: f"{100 * s['hit_rate']:.1f}%"),
        ("mean TTFT", lambda s: f"{1000 * s['ttft_mean_s']:.0f} ms"),
        ("p50 TTFT", lambda s: f"{1000 * s['ttft_p50_s']:.0f} ms"),
        ("p99 TTFT", lambda s: f"{1000 * s['ttft_p99_s']:.0f} ms"),
        ("tool-resume TTFT (mean)", lambda s: f"{1000 * s['ttft_resume_mean_s']:.0f} ms"),
        (
            "hop CPU per request",
            lambda s: f"{s['middle_cpu_ms_per_request']:.1f} ms" if "middle_cpu_ms_per_request" in s else "-",
        ),
        ("hop peak RSS", lambda s: f"{s['middle_rss_peak_mb']:.0f} MB" if "middle_rss_peak_mb" in s else "-"),
        ("proxy actions", lambda s: str(s.get("proxy_actions", "-"))),
    ]
    names = list(report["arms"])
    lines = [f"{'':<26}" + "".join(f"{n:>14}" for n in names)]
    for label, fmt in rows:
        lines.append(f"{label:<26}" + "".join(f"{fmt(report['arms'][n]):>14}" for n in names))
    if "bytes" in report:
        b = report["bytes"]
        lines.append(f"bytes: {b['sent']} client bodies, {b['changed_or_missing']} changed or missing at the engine")
    lines.append(f"wall {report['wall_s']:.0f} s, time scale {report['time_scale']:g}")
    return "\n".join(lines)
