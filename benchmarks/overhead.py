"""How much the proxy costs: the same load direct, through CacheScout, and through a minimal
FastAPI+httpx pass-through, interleaved round by round in one run (so machine noise hits all alike).

    .venv/bin/python benchmarks/overhead.py                # default: 3 rounds, modest counts
    .venv/bin/python benchmarks/overhead.py --rounds 1 --scale 0.25   # quick look

Targets (each a separate process, one uvicorn worker, on 127.0.0.1):
  direct                  the fast upstream itself (benchmarks/fast_upstream.py)
  cachescout[aiohttp]     `cachescout serve --no-policy` (default transport: httpx API over aiohttp)
  cachescout[policy]      the default configuration: policy on (parse, fingerprint, learn, plan) with
                          `engine=none`, so the cost of learning is measured without warmup traffic
  cachescout[httpx]       same with CACHESCOUT_UPSTREAM_TRANSPORT=httpx (httpcore pool, sniffio installed)
  cachescout[httpx-no-sniffio]  the same as if sniffio were not installed (benchmarks/serve_without_sniffio.py)
  minimal                 benchmarks/minimal_passthrough.py
Phases per target and round: non-stream at concurrency 64 (req/s, CPU), non-stream at concurrency 8
(latency p50/p99), streaming at concurrency 32 (time to first body byte p50/p99; the upstream sends
16 SSE events 5 ms apart). CPU ms/request = the proxy process's user+system CPU time (from
/proc/<pid>/stat) over the requests it served in the measured phases. The load generator is an
aiohttp client in this process; on a small machine it competes with the proxy for cores, which
lowers every row's req/s alike; CPU ms/request is the figure least affected by that.
The cachescout[policy] row adds the policy's per-request cost; the others measure forwarding alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from proxy.harness.child_process import free_port

ROOT = Path(__file__).resolve().parents[1]
BODY = json.dumps(
    {
        "model": "bench",
        "max_tokens": 64,
        "messages": [
            {"role": "system", "content": "You are a careful math tutor. " * 8},
            {"role": "user", "content": "What is six times seven?"},
        ],
    }
).encode()
STREAM_BODY = BODY[:-1] + b', "stream": true}'
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def wait_up(url: str, timeout: float = 30.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status < 500:
                    return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


@dataclass
class Target:
    name: str
    url: str
    proc: subprocess.Popen | None
    cpu_s: float = 0.0
    cpu_stream_s: float = 0.0
    stream_requests: int = 0
    requests: int = 0
    errors: int = 0
    rps: list[float] = field(default_factory=list)
    lat: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)


async def run_phase(
    session: aiohttp.ClientSession, url: str, concurrency: int, total: int, stream: bool
) -> tuple[float, list[float], int]:
    """(wall seconds, per-request latency or TTFB, errors)."""
    samples: list[float] = []
    errors = 0
    remaining = total

    async def worker() -> None:
        nonlocal remaining, errors
        while remaining > 0:
            remaining -= 1
            t0 = time.perf_counter()
            try:
                async with session.post(
                    url + "/v1/chat/completions",
                    data=STREAM_BODY if stream else BODY,
                    headers={"content-type": "application/json", "authorization": "Bearer sk-bench"},
                ) as r:
                    if stream:
                        await r.content.readany()
                        samples.append(time.perf_counter() - t0)
                        await r.read()
                    else:
                        await r.read()
                        samples.append(time.perf_counter() - t0)
                    if r.status != 200:
                        errors += 1
            except (TimeoutError, aiohttp.ClientError):
                errors += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0, samples, errors


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench(targets: list[Target], rounds: int, scale: float) -> None:
    n64, n8, n32 = int(2000 * scale), int(800 * scale), int(480 * scale)
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, skip_auto_headers=("User-Agent",)) as s:
        for t in targets:  # warm connections and imports
            await run_phase(s, t.url, 16, 200, False)
            await run_phase(s, t.url, 8, 40, True)
        for rnd in range(rounds):
            for t in targets if rnd % 2 == 0 else list(reversed(targets)):
                cpu0 = cpu_seconds(t.proc.pid) if t.proc else 0.0
                wall, _, err1 = await run_phase(s, t.url, 64, n64, False)
                t.rps.append(n64 / wall)
                _, lat, err2 = await run_phase(s, t.url, 8, n8, False)
                t.lat += lat
                cpu1 = cpu_seconds(t.proc.pid) if t.proc else 0.0
                _, ttfb, err3 = await run_phase(s, t.url, 32, n32, True)
                t.ttfb += ttfb
                if t.proc:
                    cpu2 = cpu_seconds(t.proc.pid)
                    t.cpu_s += cpu2 - cpu0
                    t.cpu_stream_s += cpu2 - cpu1
                    t.stream_requests += n32
                t.requests += n64 + n8 + n32
                t.errors += err1 + err2 + err3
                print(f"  round {rnd + 1}/{rounds} {t.name}: {n64 / wall:.0f} req/s", file=sys.stderr)


def report(targets: list[Target]) -> str:
    direct = targets[0]
    d50, dt50 = pct(direct.lat, 0.5), pct(direct.ttfb, 0.5)
    rows = [
        "| target | req/s @64 (median of rounds) | p50 / p99 ms @8 | added p50 ms @8 | stream TTFB p50 / p99 ms @32 "
        "| added TTFB p50 ms | CPU ms/request (all / non-stream / stream) | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for t in targets:
        p50, p99 = pct(t.lat, 0.5), pct(t.lat, 0.99)
        f50, f99 = pct(t.ttfb, 0.5), pct(t.ttfb, 0.99)
        if t.proc and t.requests:
            plain = (t.cpu_s - t.cpu_stream_s) / (t.requests - t.stream_requests)
            stream = 1000 * t.cpu_stream_s / t.stream_requests
            cpu = f"{1000 * t.cpu_s / t.requests:.2f} / {1000 * plain:.2f} / {stream:.2f}"
        else:
            cpu = "(upstream)"
        rows.append(
            f"| {t.name} | {statistics.median(t.rps):.0f} | {1000 * p50:.1f} / {1000 * p99:.1f} | "
            f"{1000 * (p50 - d50):+.1f} | {1000 * f50:.1f} / {1000 * f99:.1f} | {1000 * (f50 - dt50):+.1f} | "
            f"{cpu} | {t.errors} |"
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply request counts (default 2000/800/480)")
    parser.add_argument("--only", default="", help="comma list of target names to include (direct is always run)")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of the code to compare with (e.g. "
        "`git archive main | tar -x -C /tmp/base`): its cachescout[aiohttp] and "
        "cachescout[policy] run as baseline[...] rows, interleaved with this tree's",
    )
    args = parser.parse_args()

    py = sys.executable
    up_port = free_port()
    up_url = f"http://127.0.0.1:{up_port}"
    specs = [
        (
            "cachescout[aiohttp]",
            [
                py,
                "-m",
                "proxy.cli",
                "serve",
                "--no-policy",
                "--log-level",
                "warning",
                "--upstream-transport",
                "aiohttp",
            ],
        ),
        (
            "cachescout[policy]",
            [
                py,
                "-m",
                "proxy.cli",
                "serve",
                "--log-level",
                "warning",
                "--upstream-transport",
                "aiohttp",
                "--set",
                "engine=none",
            ],
        ),
        (
            "cachescout[httpx]",
            [py, "-m", "proxy.cli", "serve", "--no-policy", "--log-level", "warning", "--upstream-transport", "httpx"],
        ),
        (
            "cachescout[httpx-no-sniffio]",
            [
                py,
                str(ROOT / "benchmarks" / "serve_without_sniffio.py"),
                "--no-policy",
                "--log-level",
                "warning",
                "--upstream-transport",
                "httpx",
            ],
        ),
        ("minimal", [py, str(ROOT / "benchmarks" / "minimal_passthrough.py")]),
    ]
    if args.baseline is not None:
        base = {n: c for n, c in specs if n in ("cachescout[aiohttp]", "cachescout[policy]")}
        specs += [(n.replace("cachescout", "baseline"), c) for n, c in base.items()]
    wanted = {w.strip() for w in args.only.split(",") if w.strip()}
    procs: list[subprocess.Popen] = []
    try:
        up = subprocess.Popen([py, str(ROOT / "benchmarks" / "fast_upstream.py"), "--port", str(up_port)], cwd=ROOT)
        procs.append(up)
        targets = [Target("direct", up_url, None)]
        for name, cmd in specs:
            if wanted and name not in wanted:
                continue
            port = free_port()
            extra = ["--upstream", up_url, "--port", str(port)]
            where, env = ROOT, None
            if name.startswith("baseline"):
                where, env = args.baseline, {**os.environ, "PYTHONPATH": str(args.baseline)}
            proc = subprocess.Popen(cmd + extra, cwd=where, env=env, stdout=subprocess.DEVNULL)
            procs.append(proc)
            targets.append(Target(name, f"http://127.0.0.1:{port}", proc))
        time.sleep(0.5)
        for t in targets:
            wait_up(t.url + ("/livez" if t.name.startswith(("cachescout", "baseline")) else "/v1/models"))
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        asyncio.run(bench(targets, args.rounds, args.scale))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
    table = report(targets)
    print(f"\ncores: {os.cpu_count()}, rounds: {args.rounds}, scale: {args.scale}\n")
    print(table)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    t.name: {
                        "rps": t.rps,
                        "lat_p50": pct(t.lat, 0.5),
                        "lat_p99": pct(t.lat, 0.99),
                        "ttfb_p50": pct(t.ttfb, 0.5),
                        "ttfb_p99": pct(t.ttfb, 0.99),
                        "cpu_ms_per_request": 1000 * t.cpu_s / t.requests if t.proc else None,
                        "errors": t.errors,
                    }
                    for t in targets
                },
                indent=2,
            )
        )
    return 1 if any(t.errors for t in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
