"""The parse-flood probe (issue 39): `/livez` latency and the proxy's RSS while 8 clients post
1-4 MiB chat bodies, against the default `cachescout serve` (policy on, no health port).

    .venv/bin/python benchmarks/parse_flood.py                       # 40 s, policy on
    .venv/bin/python benchmarks/parse_flood.py --policy off          # the same bytes, pass-through
    .venv/bin/python benchmarks/parse_flood.py --tree /path/to/checkout   # another tree (before/after)

The engine is `tests/fault/hostile_upstream.py` (a raw-socket stand-in answering a small JSON reply).
`/livez` is polled on the proxy's main port from a process of its own, on a new connection every
~10 ms; RSS is read from /proc every 100 ms (peak), before the flood (idle), and `--settle` seconds
after it (after). Each body is distinct per client and round (a new session each time, as agents
that all keep growing their prompts), with 8 system prompts shared by pairs of clients (agents).
Prints one line of figures and, with `--json`, the raw numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.harness.child_process import child_process, free_port  # noqa: E402

GOOD = {"authorization": "Bearer good"}
PROBE = r"""
import http.client, json, os, sys, time
host, port, stop_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = []
while not os.path.exists(stop_file):
    t0 = time.perf_counter()
    try:
        c = http.client.HTTPConnection(host, port, timeout=10)
        c.request("GET", "/livez")
        status = c.getresponse().status
        c.close()
    except Exception:
        status = 0
    out.append([time.perf_counter() - t0, status])
    time.sleep(0.01)
print(json.dumps(out))
"""


def flood_template(k: int, size: int) -> bytes:
    """~`size` bytes: agent k%8's system prompt, then 2 kB turns; `#NNNNNN#` in the first turn and
    the user field is replaced per request (a new conversation each time, built without re-encoding)."""
    msgs = [{"role": "system", "content": f"You are flood agent {k % 8}. " * 40}]
    turn = 0
    while sum(len(m["content"]) for m in msgs) < size - 4096:
        tag = "#NNNNNN#" if turn == 0 else ""
        msgs.append({"role": "user" if turn % 2 == 0 else "assistant", "content": f"turn {turn}{tag}: " + "x" * 2000})
        turn += 1
    return json.dumps({"model": "m", "user": f"flood-{k}#NNNNNN#", "max_tokens": 8, "messages": msgs}).encode()


def hostile_template(k: int, shape: str) -> tuple[str, bytes]:
    """Issue 39's hostile bodies: 40k items, 3-4.5 MB, as a Responses `input` or a Messages list."""
    if shape == "responses":
        items = [
            {"type": "message", "role": ("user", "assistant")[i % 2], "content": f"#NNNNNN# {i} " + "y" * 12}
            for i in range(40_000)
        ]
        return "/v1/responses", json.dumps({"model": "m", "max_output_tokens": 4, "input": items}).encode()
    msgs = [{"role": ("user", "assistant")[i % 2], "content": f"#NNNNNN# {i} " + "y" * 12} for i in range(40_000)]
    return "/v1/messages", json.dumps({"model": "m", "max_tokens": 4, "messages": msgs}).encode()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children_rss_mb(pid: int) -> float:
    """RSS of the proxy's child processes (a parse worker, a health port), summed."""
    total = 0.0
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                total += rss_mb(int(p.name))
    return total


async def flood(url: str, clients: int, seconds: float, sizes: list[int], shape: str = "chat") -> tuple[int, int]:
    bad = 0
    path = "/v1/chat/completions"
    if shape == "chat":
        templates = {(k, i): flood_template(k, size) for k in range(clients) for i, size in enumerate(sizes)}
    else:
        path, body = hostile_template(0, shape)
        templates = {(k, i): body for k in range(clients) for i in range(len(sizes))}
    async with httpx.AsyncClient(timeout=120) as c:

        async def client(k: int) -> int:
            nonlocal bad
            n = 0
            while time.monotonic() < until:
                body = templates[(k, (k + n) % len(sizes))].replace(b"#NNNNNN#", b"%08d" % n)
                r = await c.post(url + path, content=body, headers=GOOD)
                bad += r.status_code != 200
                n += 1
            return n

        until = time.monotonic() + seconds
        sent = sum(await asyncio.gather(*(client(k) for k in range(clients))))
    return sent, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--policy", choices=("on", "off"), default="on")
    ap.add_argument("--tree", type=Path, default=ROOT, help="checkout whose `proxy` package runs the proxy")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds after the flood before 'after' RSS")
    ap.add_argument("--set", action="append", default=[], help="extra `--set name=value` for the proxy")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--shape",
        choices=("chat", "responses", "messages"),
        default="chat",
        help="chat: 1-4 MiB chat bodies; responses/messages: 40k-item hostile bodies (issue 39 item 3)",
    )
    a = ap.parse_args()
    sizes = [(1 << 20) + i * (3 << 20) // 7 for i in range(8)]  # 1 .. 4 MiB
    eport, pport = free_port(), free_port()
    eng = f"http://127.0.0.1:{eport}"
    url = f"http://127.0.0.1:{pport}"
    cmd = [sys.executable, "-m", "proxy.cli", "serve", "--upstream", eng, "--port", str(pport)]
    cmd += ["--log-level", "warning"] + (["--no-policy"] if a.policy == "off" else [])
    for s in a.set:
        cmd += ["--set", s]
    env = {"PYTHONPATH": str(a.tree)}
    with (
        tempfile.TemporaryDirectory() as tmp,
        child_process(
            [sys.executable, str(ROOT / "tests/fault/hostile_upstream.py"), "--port", str(eport)], eng + "/health"
        ),
        child_process(cmd, url + "/livez", cwd=a.tree, env=env, timeout=60) as px,
    ):
        time.sleep(1.0)
        idle = rss_mb(px.pid)
        rss = [idle]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.1):
                rss.append(rss_mb(px.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        stop = Path(tmp) / "stop"
        probe = subprocess.Popen(
            [sys.executable, "-c", PROBE, "127.0.0.1", str(pport), str(stop)], stdout=subprocess.PIPE, text=True
        )
        time.sleep(0.3)
        t0 = time.monotonic()
        sent, bad = asyncio.run(flood(url, a.clients, a.seconds, sizes, a.shape))
        wall = time.monotonic() - t0
        stop.touch()
        lat = json.loads(probe.communicate(timeout=60)[0] or "[]")
        done.set()
        sampler.join()
        kids = children_rss_mb(px.pid)
        time.sleep(a.settle)
        after = rss_mb(px.pid)
        metrics = httpx.get(url + "/metrics", timeout=30).text
    skipped = {
        line.split('reason="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("cachescout_policy_skipped_total{")
    }
    kept = {
        line.split('store="')[1].split('"')[0]: round(float(line.rsplit(" ", 1)[1]) / 1e6, 1)
        for line in metrics.splitlines()
        if line.startswith("cachescout_kept_bytes{")
    }
    times = sorted(x[0] for x in lat)
    statuses = [x[1] for x in lat]
    p99 = times[min(len(times) - 1, int(0.99 * len(times)))] if times else float("nan")
    load = os.getloadavg()[0]
    out = {
        "policy": a.policy,
        "shape": a.shape,
        "tree": str(a.tree),
        "seconds": round(wall, 1),
        "sent": sent,
        "non_200": bad,
        "livez_n": len(times),
        "livez_non_200": sum(s != 200 for s in statuses),
        "livez_p50_ms": round(statistics.median(times) * 1000, 1) if times else None,
        "livez_p99_ms": round(p99 * 1000, 1),
        "livez_max_ms": round(times[-1] * 1000, 1) if times else None,
        "rss_idle_mb": round(idle),
        "rss_peak_mb": round(max(rss)),
        "rss_after_mb": round(after),
        "children_rss_mb": round(kids),
        "skipped": skipped,
        "kept_mb": kept,
        "load_avg_1m": round(load, 1),
    }
    print(
        f"policy {a.policy}, {a.shape}: {sent} bodies in {wall:.0f} s ({bad} non-200); /livez n={len(times)} "
        f"p50 {out['livez_p50_ms']} p99 {out['livez_p99_ms']} max {out['livez_max_ms']} ms "
        f"({out['livez_non_200']} non-200); RSS idle {out['rss_idle_mb']} peak {out['rss_peak_mb']} "
        f"after {out['rss_after_mb']} MB (children {out['children_rss_mb']} MB); kept MB {kept}; skipped {skipped}; "
        f"load {load:.1f}"
    )
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
