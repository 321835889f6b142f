"""Issue 37 item 6's bounds for the live proxy on Claude Code-sized traffic, measured over sockets.

1. CPU per request with a ~400 KB body: `cachescout serve` against a plain FastAPI+httpx
   pass-through (`proxy.bench.passthrough`), each in front of its own simulated engine, the same
   requests to both (8 sessions x 6 requests, each prompt ~50k tokens = ~400 KB of JSON, the next
   one extending the last, as a coding agent's do). CPU = the hop process's user + system seconds
   (from /proc) over the requests. Bound: proxy <= 2x the pass-through.
2. Peak RSS with 64 sessions of 100k+ tokens in flight: 64 sessions send a ~100k-token prompt at
   once, then a ~102k-token continuation, through the proxy to a simulated engine slow enough that
   they queue (all in flight together). RSS = the proxy's VmHWM. Bound: <= 500 MB.
3. No error, no byte changed: in both runs a recording pass-through between the proxy and its
   engine keeps the SHA-256 of each body it forwards; every body the client sent must be there.

CPU time, not wall time, is compared, so the figures hold on a loaded machine better than
latencies; the two hops run at once so load falls on both alike. Usage:
    python benchmarks/claude_code_live.py [--sessions-cpu 8 --requests 6] [--sessions-rss 64] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from proxy.bench.claude_code_live import BLOCK_SIZE, PlannedRequest, Segment, run_live, summary
from proxy.bench.cli import bytes_check, proc_usage, start_arms

MODEL = "sim-claude-code"


def sessions_of(n_sessions: int, n_requests: int, head_blocks: int, first_blocks: int, step_blocks: int) -> dict:
    """Synthetic coding-agent sessions: a fixed head shared by all, then each session's own history
    growing by `step_blocks` a request (an answer block and a tool result), tool loops throughout."""
    out: dict[str, list[PlannedRequest]] = {}
    head = tuple(range(1, head_blocks + 1))
    for s in range(n_sessions):
        base = (s + 1) << 32
        reqs = []
        user = tuple(base + i for i in range(first_blocks - head_blocks))
        segs: list[Segment] = [Segment("system", head), Segment("user", user)]
        nxt = base + len(user)
        for k in range(n_requests):
            if k:
                segs = [*segs, Segment("assistant", (nxt,), f"call_{k - 1}")]
                tool = tuple(range(nxt + 1, nxt + step_blocks))
                segs.append(Segment("tool", tool, f"call_{k - 1}"))
                nxt += step_blocks
            blocks = sum(len(x.blocks) for x in segs)
            reqs.append(PlannedRequest(f"s{s}", k, 0.0, 0.0, tuple(segs), 1, True, k > 0, blocks))
        out[f"s{s}"] = reqs
    return out


def run_case(name: str, sessions: dict, engine_args: list[str], arms: list[str]) -> dict:
    args = argparse.Namespace(
        time_scale=1.0,
        capacity_blocks=65_536,
        max_model_len=1_048_576,
        prefill_tokens_per_s=1_000_000.0,
        seed=0,
        sim_arg=engine_args,
        policy=[],
        verify_bytes=True,
    )
    with start_arms(args, arms, "bench-admin") as started:
        before = {a.name: proc_usage(a.middle.pid) for a in started if a.middle is not None}

        async def go() -> list:
            return list(await asyncio.gather(*(run_live(a.url, sessions, model=MODEL) for a in started)))

        results = asyncio.run(go())
        rep: dict = {"case": name, "arms": {}}
        for arm, res in zip(started, results, strict=True):
            s = summary(res)
            if arm.middle is not None:
                after = proc_usage(arm.middle.pid)
                s["cpu_ms_per_request"] = 1000 * (after["cpu_s"] - before[arm.name]["cpu_s"]) / max(1, s["requests"])
                s["rss_peak_mb"] = after["rss_peak_mb"]
            if arm.recorder_url is not None:
                import httpx

                got = httpx.get(arm.recorder_url + "/digests", timeout=30).json()["digests"]
                s["bytes"] = bytes_check(res.sent_digests, got)
            rep["arms"][arm.name] = {k: v for k, v in s.items() if k != "error_kinds" or v}
    return rep


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions-cpu", type=int, default=8)
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--sessions-rss", type=int, default=64)
    ap.add_argument("--skip-rss", action="store_true")
    ap.add_argument("--json", dest="json_out", default=None)
    a = ap.parse_args()
    reports = []
    # 1. ~400 KB bodies: 780 blocks = ~50k tokens = ~400 KB of JSON (512 characters a block)
    cpu = sessions_of(a.sessions_cpu, a.requests, head_blocks=230, first_blocks=760, step_blocks=8)
    size = len(json.dumps({"m": [["x" * 512] * 780]}))
    print(f"case 1: {a.sessions_cpu} sessions x {a.requests} requests, bodies ~{size / 1024:.0f} KB", file=sys.stderr)
    r1 = run_case("cpu_400kb", cpu, ["--speed", "20"], ["proxy", "passthrough"])
    p, b = r1["arms"]["proxy"], r1["arms"]["passthrough"]
    r1["ratio"] = p["cpu_ms_per_request"] / max(1e-9, b["cpu_ms_per_request"])
    reports.append(r1)
    print(
        f"CPU per request: proxy {p['cpu_ms_per_request']:.1f} ms, FastAPI+httpx pass-through "
        f"{b['cpu_ms_per_request']:.1f} ms, ratio {r1['ratio']:.2f} (bound 2.0); errors {p['errors']}/{b['errors']}; "
        f"bytes changed {p['bytes']['changed_or_missing']} of {p['bytes']['sent']}"
    )
    if not a.skip_rss:
        # 2. 64 sessions of 100k+ tokens in flight: 1,570 blocks = ~100k tokens, then +32 blocks
        big = sessions_of(a.sessions_rss, 2, head_blocks=230, first_blocks=1_570, step_blocks=32)
        print(f"case 2: {a.sessions_rss} sessions of {1570 * BLOCK_SIZE:,}+ tokens at once", file=sys.stderr)
        r2 = run_case("rss_64x100k", big, ["--speed", "40"], ["proxy"])
        p = r2["arms"]["proxy"]
        reports.append(r2)
        print(
            f"peak RSS, {a.sessions_rss} sessions of 100k+ tokens in flight: {p['rss_peak_mb']:.0f} MB (bound 500); "
            f"errors {p['errors']}; bytes changed {p['bytes']['changed_or_missing']} of {p['bytes']['sent']}"
        )
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(reports, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
