"""Full-size figures for issue 13 (the fault suite in tests/fault runs smaller CI variants).

    .venv/bin/python benchmarks/hardening.py                  # all three
    .venv/bin/python benchmarks/hardening.py --only prompts --sessions 1000
    .venv/bin/python benchmarks/hardening.py --only queued --sessions 40000
    .venv/bin/python benchmarks/hardening.py --only livez

prompts  RSS of `cachescout serve` (default settings, policy on) after N sessions x 1 MB prompts
queued   RSS after N new sessions (half n=2: fan-out parents) against an engine whose queue is 10
livez    /livez latency p50/p99 (10 ms apart) while a 50 MB body and a separator-less 16 MiB stream
         pass through
Every process is a child of this one (hostile engine: tests/fault/hostile_upstream.py), stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fault.conftest import GOOD, livez_probe, proxy, upstream  # noqa: E402

CHAT = "/v1/chat/completions"


def body(sid: str, text: str, **extra) -> bytes:
    return json.dumps(
        {
            "model": "m",
            "user": sid,
            "max_tokens": 8,
            **extra,
            "messages": [
                {"role": "system", "content": "You are the benchmark agent. " * 20},
                {"role": "user", "content": text},
            ],
        }
    ).encode()


async def _drive(url: str, bodies, concurrency: int) -> None:
    async with httpx.AsyncClient(timeout=120) as c:
        sem = asyncio.Semaphore(concurrency)

        async def one(b: bytes) -> None:
            async with sem:
                r = await c.post(url + CHAT, content=b, headers=GOOD)
                assert r.status_code == 200, r.status_code

        await asyncio.gather(*(one(b) for b in bodies))


def prompts(n: int, tmp: Path) -> dict:
    with upstream() as up, proxy(up, tmp) as px:
        rss0 = px.rss_mb()
        t0 = time.monotonic()
        for start in range(0, n, 50):
            batch = [
                body(f"m{k}", f"session {k}: " + (f"w{k} " * 250_000)[:1_000_000])
                for k in range(start, min(n, start + 50))
            ]
            asyncio.run(_drive(px.url, batch, 4))
        time.sleep(1.0)
        st = px.state()
        return {
            "case": f"{n} sessions x 1 MB prompts",
            "rss_before_mb": round(rss0),
            "rss_after_mb": round(px.rss_mb()),
            "observed": st["observer"]["observed"],
            "sessions_kept": st["stats"]["sessions"],
            "seconds": round(time.monotonic() - t0, 1),
        }


def queued(n: int, tmp: Path) -> dict:
    with upstream(waiting=10) as up, proxy(up, tmp, engine="vllm") as px:
        rss0 = px.rss_mb()
        t0 = time.monotonic()
        for start in range(0, n, 2000):
            asyncio.run(
                _drive(
                    px.url,
                    [
                        body(f"q{k}", f"task {k} " * 400, n=2 if k % 2 else 1)
                        for k in range(start, min(n, start + 2000))
                    ],
                    32,
                )
            )
        time.sleep(1.0)
        st = px.state()
        return {
            "case": f"{n} new sessions, engine queue 10",
            "rss_before_mb": round(rss0),
            "rss_after_mb": round(px.rss_mb()),
            "observed": st["observer"]["observed"],
            "actions": sum(st["stats"]["actions_emitted"].values()),
            "seconds": round(time.monotonic() - t0, 1),
        }


def livez(tmp: Path) -> dict:
    big = body("big", "y" * (50 << 20))
    nosep = body("ns", "s", nosep=True)
    with upstream() as up, proxy(up, tmp) as px:

        async def load() -> None:
            async with httpx.AsyncClient(timeout=120) as c:

                async def stream() -> None:
                    async with c.stream("POST", px.url + CHAT, content=nosep, headers=GOOD) as r:
                        async for _ in r.aiter_raw():
                            pass

                await asyncio.gather(c.post(px.url + CHAT, content=big, headers=GOOD), stream())

        t0 = time.monotonic()
        with livez_probe(px.url, tmp) as lat:
            asyncio.run(load())
        q = statistics.quantiles(lat, n=100)
        return {
            "case": "livez during 50 MB body + 16 MiB separator-less stream",
            "samples": len(lat),
            "p50_ms": round(1000 * q[49], 1),
            "p99_ms": round(1000 * q[98], 1),
            "max_ms": round(1000 * max(lat), 1),
            "seconds": round(time.monotonic() - t0, 1),
        }


def main() -> None:
    import tempfile

    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=("prompts", "queued", "livez"))
    ap.add_argument("--sessions", type=int, default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for case in ("prompts", "queued", "livez"):
            if a.only and case != a.only:
                continue
            with contextlib.suppress(KeyboardInterrupt):
                if case == "prompts":
                    print(json.dumps(prompts(a.sessions or 1000, tmp)), flush=True)
                elif case == "queued":
                    print(json.dumps(queued(a.sessions or 40000, tmp)), flush=True)
                else:
                    print(json.dumps(livez(tmp)), flush=True)


if __name__ == "__main__":
    main()
