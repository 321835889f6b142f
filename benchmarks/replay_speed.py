"""Replay speed: requests per second of virtual-time replay, per policy, on the Mooncake
conversation trace (../shared/traces/conversation_trace.jsonl), target >= 20k req/s for lru.

Measures `run_policy` (the policy + cache + per-request recording: what scales with the trace),
best of --repeat runs (wall clock, and per CPU-second, which is what a busy machine distorts
least), and separately the summary (TTFT queue + throughput-at-budget search).
Without the shared traces it says so and measures the `selector` workload preset instead.

    python benchmarks/replay_speed.py [--trace FILE] [--share 0.05] [--policies lru,scout-proxy]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from proxy.cachemodel.cost_model import CostModel  # noqa: E402
from proxy.replay.runner import ReplaySettings, make_policy, resolve_capacity, run_policy  # noqa: E402
from proxy.replay.traces import load_trace  # noqa: E402
from proxy.replay.workloads import generate, preset  # noqa: E402

DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "conversation_trace.jsonl"
TARGET_LRU_RPS = 20_000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", default=str(DEFAULT_TRACE))
    p.add_argument("--share", default="0.05", help="capacity as a share of unique blocks (or blocks)")
    p.add_argument("--policies", default="lru,scout-proxy")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    args = p.parse_args(argv)

    if Path(args.trace).is_file():
        res = load_trace(args.trace)
        reqs, block_size, source = res.requests, res.block_size, args.trace
    else:
        print(f"note: {args.trace} is absent; measuring the 'selector' workload preset instead", file=sys.stderr)
        reqs, block_size, source = generate(preset("selector")), 16, "workload:selector"
    cap = resolve_capacity(args.share, reqs)
    cost = CostModel()
    settings = ReplaySettings(block_size=block_size)
    rows = []
    for name in [n.strip() for n in args.policies.split(",") if n.strip()]:
        best = cpu_best = float("inf")
        rec = None
        for _ in range(max(1, args.repeat)):
            pol = make_policy(name, settings)
            t0, c0 = time.perf_counter(), time.process_time()
            rec = run_policy(pol, reqs, cap, cost, block_size=block_size)
            best = min(best, time.perf_counter() - t0)
            cpu_best = min(cpu_best, time.process_time() - c0)
            if best > 5.0:
                break  # slow policies: one run is a stable enough figure
        t0 = time.perf_counter()
        summ = rec.summary(reqs[-1].t - reqs[0].t, 2.0)
        summary_s = time.perf_counter() - t0
        rows.append(
            {
                "policy": name,
                "requests": len(reqs),
                "seconds": round(best, 4),
                "requests_per_s": round(len(reqs) / best),
                "requests_per_cpu_s": round(len(reqs) / max(cpu_best, 1e-9)),
                "hit_rate": round(summ["hit_rate"], 4),
                "block_hit_rate": round(summ["block_hit_rate"], 4),
                "summary_s": round(summary_s, 3),
            }
        )
    doc = {"source": source, "capacity_blocks": cap, "rows": rows, "target_lru_rps": TARGET_LRU_RPS}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"replay speed on {source} ({len(reqs)} requests, capacity {cap} blocks)")
        print(
            f"{'policy':<22} {'req/s':>10} {'req/CPU-s':>10} {'seconds':>9} {'hit':>7} {'block hit':>9} "
            f"{'summary s':>10}"
        )
        for r in rows:
            print(
                f"{r['policy']:<22} {r['requests_per_s']:>10} {r['requests_per_cpu_s']:>10} {r['seconds']:>9.3f} "
                f"{r['hit_rate']:>7.4f} {r['block_hit_rate']:>9.4f} {r['summary_s']:>10.3f}"
            )
    lru = next((r for r in rows if r["policy"] == "lru"), None)
    if lru is not None and source != "workload:selector" and lru["requests_per_s"] < TARGET_LRU_RPS:
        print(f"lru below target: {lru['requests_per_s']} < {TARGET_LRU_RPS} req/s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
