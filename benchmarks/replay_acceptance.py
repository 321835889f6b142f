"""Issue 11's replay acceptance table in one run (a benchmark, not a test).

    .venv/bin/python benchmarks/replay_acceptance.py [--seeds 1,2,3] [--workloads selector,pipeline,swebench,gaia]
                                                     [--control random,mtbench] [--jobs 2] [--scout-set K=V ...]

For every workload preset x default capacity (``cachescout replay``'s defaults) x seed it replays
lru, scout-proxy and belady and prints, per cell: scout-proxy's throughput at the latency budget
relative to LRU, mean TTFT and per-turn latency relative to LRU, the share of the LRU->Belady
mean-TTFT gap closed, ``net_saved_vs_lru_s`` and which signal spent the most. Then the averages
and the issue's acceptance verdicts. Control workloads (``--control``) are judged on "within 1% of
LRU" only. ``--json FILE`` writes every cell.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.cachemodel.cost_model import CostModel
from proxy.replay.cli import DEFAULT_WORKLOAD_CAPACITY, parse_overrides
from proxy.replay.runner import ReplaySettings, replay, resolve_capacity
from proxy.replay.workloads import generate, preset

POLICY = "scout-proxy"


def one(job: tuple[str, int, dict, float]) -> list[dict]:
    workload, seed, overrides, budget = job
    spec = preset(workload, seed=seed)
    reqs = generate(spec)
    caps = [resolve_capacity(c, reqs) for c in DEFAULT_WORKLOAD_CAPACITY.split(",")]
    s = ReplaySettings(block_size=spec.block_size, latency_budget_s=budget, scout_overrides=overrides, cost=CostModel())
    res = replay(reqs, caps, [POLICY], s)
    rows = []
    for row in res["capacities"]:
        p = row["policies"]
        lru, sp, bel = p["lru"], p[POLICY], p["belady"]
        gap = lru["ttft_mean_s"] - bel["ttft_mean_s"]
        sig = sp["signals"]
        spender = max(sig.items(), key=lambda kv: kv[1]["cost_s"] + kv[1]["pollution_s"])[0] if sig else "-"
        rows.append(
            {
                "workload": workload,
                "seed": seed,
                "capacity": row["capacity_blocks"],
                "thr_x": sp["throughput_at_budget_rps"] / lru["throughput_at_budget_rps"]
                if lru["throughput_at_budget_rps"]
                else 1.0,
                "bel_thr_x": bel["throughput_at_budget_rps"] / lru["throughput_at_budget_rps"]
                if lru["throughput_at_budget_rps"]
                else 1.0,
                "ttft_x": sp["ttft_mean_s"] / lru["ttft_mean_s"] if lru["ttft_mean_s"] else 1.0,
                "turn_x": sp["turn_mean_s"] / lru["turn_mean_s"] if lru["turn_mean_s"] else 1.0,
                "gap_closed": (lru["ttft_mean_s"] - sp["ttft_mean_s"]) / gap if gap > 1e-9 else None,
                "hit_lru": lru["hit_rate"],
                "hit_scout": sp["hit_rate"],
                "hit_belady": bel["hit_rate"],
                "net_saved_vs_lru_s": sp.get("net_saved_vs_lru_s", 0.0),
                "warmup_s": sp["warmup_s"],
                "pollution_s": sp["pollution_s"],
                "actions": sp["actions"],
                "spender": spender,
                "signals": {
                    k: {kk: round(vv, 3) if isinstance(vv, float) else vv for kk, vv in v.items()}
                    for k, v in sig.items()
                },
                "extra": {k: v for k, v in sp["extra"].items() if k != "actions_emitted"},
            }
        )
    return rows


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else float("nan")


def table(rows: list[dict]) -> str:
    out = [
        "| workload | seed | cap | thr × LRU | (belady) | TTFT × LRU | turn × LRU | TTFT gap closed "
        "| hit lru→scout (belady) | net_saved_vs_lru_s | warm s | top spender |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        g = "-" if r["gap_closed"] is None else f"{100 * r['gap_closed']:.0f}%"
        out.append(
            f"| {r['workload']} | {r['seed']} | {r['capacity']} | {r['thr_x']:.3f} | {r['bel_thr_x']:.2f} | "
            f"{r['ttft_x']:.3f} | {r['turn_x']:.3f} | {g} | {r['hit_lru']:.3f}→{r['hit_scout']:.3f} "
            f"({r['hit_belady']:.3f}) | {r['net_saved_vs_lru_s']:+.1f} | {r['warmup_s']:.1f} | {r['spender']} |"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--workloads", default="selector,pipeline,swebench,gaia")
    ap.add_argument("--control", default="random,mtbench")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--latency-budget", type=float, default=2.0, help="as cachescout replay's default")
    ap.add_argument("--scout-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    main_w = [w for w in args.workloads.split(",") if w]
    ctrl_w = [w for w in args.control.split(",") if w]
    overrides = parse_overrides(args.scout_set)
    jobs = [(w, s, overrides, args.latency_budget) for w in main_w + ctrl_w for s in seeds]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        results = list(ex.map(one, jobs))
    rows = [r for rs in results for r in rs]
    main_rows = [r for r in rows if r["workload"] in main_w]
    ctrl_rows = [r for r in rows if r["workload"] in ctrl_w]
    print(table(main_rows))
    if ctrl_rows:
        print("\ncontrol workloads\n")
        print(table(ctrl_rows))
    thr = mean([r["thr_x"] for r in main_rows])
    gap = mean([r["gap_closed"] for r in main_rows])
    low = min(r["thr_x"] for r in main_rows)
    print(
        f"\nmain cells: {len(main_rows)}; mean throughput × LRU {thr:.3f} (min {low:.3f}); "
        f"mean TTFT gap closed {100 * gap:.1f}%; worst TTFT × LRU {max(r['ttft_x'] for r in main_rows):.4f}; "
        f"worst turn × LRU {max(r['turn_x'] for r in main_rows):.4f}; "
        f"net_saved_vs_lru_s < 0 in {sum(r['net_saved_vs_lru_s'] < 0 for r in main_rows)} cells"
    )
    verdicts = {
        "throughput >= LRU in every cell": all(r["thr_x"] >= 1.0 for r in main_rows),
        "throughput >= 1.15x on average": thr >= 1.15,
        "mean TTFT never > LRU + 1%": all(r["ttft_x"] <= 1.01 for r in main_rows),
        "per-turn latency never > LRU + 1%": all(r["turn_x"] <= 1.01 for r in main_rows),
        ">= 30% of the TTFT gap closed on average": gap >= 0.30,
    }
    if ctrl_rows:
        verdicts["control workloads within 1% of LRU (TTFT, turn, throughput)"] = all(
            abs(r["ttft_x"] - 1) <= 0.01 and abs(r["turn_x"] - 1) <= 0.01 and r["thr_x"] >= 0.99 for r in ctrl_rows
        )
    for k, v in verdicts.items():
        print(f"  {'PASS' if v else 'FAIL'}  {k}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
