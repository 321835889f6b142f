"""SGLang's session cache on the real Claude Code sessions (issue 38 item 4; docs/results/sglang-sessions.md).

Composes the shared Claude Code traces (`proxy/replay/claude_code.py`, issue 37's loader: one user per
file, subagents as sessions) and replays them on the simulated engine for LRU, the SGLang session
cache driven by the proxy's close rule (`sglang-session`), the same without closes, the
session-oracle and pinned Belady. Prints one line per (capacity, policy) and writes the replay's
JSON report.

    python benchmarks/sglang_sessions_cc.py --users 32 --seed 0 --window 1800 --horizon 7200 \
        --capacity 4000,8000,16000 --engines 8 --out /tmp/cc38
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from proxy.replay.claude_code import BLOCK_SIZE, compose, load
from proxy.replay.runner import ReplaySettings, replay

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "claude-code"
POLICIES = ("lru", "sglang-session", "sglang-session-noclose", "session-oracle")


def _plain(o: object) -> object:
    tolist = getattr(o, "tolist", None)
    return tolist() if callable(tolist) else str(o)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--traces", default=str(TRACES))
    p.add_argument("--users", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--window", type=float, default=1800.0)
    p.add_argument("--horizon", type=float, default=7200.0)
    p.add_argument("--capacity", default="4000,8000,16000", help="blocks of 64 tokens")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument(
        "--engines",
        type=int,
        default=1,
        help="prefill servers sharing one cache (the engine computes this many times faster): the default "
        "cost model (an 8B model) cannot serve this stream in time at 1 (its prefill alone is 3x the span)",
    )
    p.add_argument("--out", default="/tmp/cc38")
    a = p.parse_args()
    comp = compose(load(a.traces).files, a.users, a.window, a.horizon, a.seed)
    reqs = comp.requests
    caps = [int(x) for x in a.capacity.split(",")]
    t0 = time.perf_counter()
    res = replay(reqs, caps, a.policies.split(","), ReplaySettings(block_size=BLOCK_SIZE, engines=a.engines))
    wall = time.perf_counter() - t0
    print(f"{len(reqs)} requests, {len({r.session_id for r in reqs})} sessions, replay {wall:.0f} s")
    for c in res["capacities"]:
        s = c["policies"]["lru"]
        print(
            f"cap {c['capacity_blocks']}: engine blocks {s['engine_capacity_blocks']}, "
            f"LRU prefill busy {s['prefill_s']:.0f} s"
        )
    for c in res["capacities"]:
        for name, s in c["policies"].items():
            ex = s.get("extra") or {}
            print(
                f"cap {c['capacity_blocks']:>6}  {name:<24} hit {s['hit_rate']:.4f}  ttft mean "
                f"{s['ttft_mean_s']:.3f}s p99 {s['ttft_p99_s']:.3f}s  resume {s.get('ttft_resume_mean_s', 0):.3f}s"
                + (f"  closes {ex['closes']}" if "closes" in ex else "")
            )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps({"args": vars(a), "results": res}, indent=1, default=_plain))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
