"""How much can any proxy on a stock LRU engine gain in the replay? (a benchmark, not a test)

    .venv/bin/python benchmarks/replay_ceiling.py [--seeds 1,2,3] [--workloads selector,pipeline,swebench,gaia]
                                                  [--jobs 2] [--replan-cells 2] [--json FILE]

Issue 11 asks scout-proxy for >= 1.15x LRU's throughput at the latency budget on average. From
outside the engine a proxy can only touch (keep a resident prefix most recent) or warm (prefill
an evicted one); a warm prefills exactly what the request it prepares would have prefilled, so
only touches can lower the engine's total work. This script bounds what touching can buy with
an oracle "keeper" that knows the workload's ground truth (each request's agent and anchor
length: measurement only, like Belady): after every request it touches the anchors of the
busiest agents (by measured request rate; together at most ``--keep-share`` of the cache)
whose blocks sit in the oldest ``--zone`` of the LRU order. Touches are ``max_tokens=1`` engine
requests, as scout-proxy's are (the replay runs on ``SimEngine``: ``proxy/replay/engine_run.py``).

Two variants, side by side with the same cells as ``replay_acceptance.py``:
- ``oracle``: touches whenever the rule says so;
- ``oracle+guard``: none while the running set alone (distinct prompt tokens of the requests in
  flight) fills the cache, the rule issue 11 item 1 sets for the product ("when the running set
  alone overflows the cache, do nothing but observe": running requests hold their blocks in the
  engine, so nothing else stays cached then).

``--replan-cells N`` also measures throughput at the budget the slow way for the first N cells:
the whole stream replayed at each candidate rate (arrival times divided by the factor), so the
policies decide at the load they are measured at, instead of the report's fixed-decision measure
(the cache outcome of one run, its prefill work re-queued on a FIFO at compressed arrival times).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.cachemodel.cost_model import CostModel
from proxy.core.economics import RunningSet
from proxy.replay import runner
from proxy.replay.cli import DEFAULT_WORKLOAD_CAPACITY
from proxy.replay.policies import ReplayPolicy
from proxy.replay.workloads import generate, preset

BUDGET_S = 2.0  # cachescout replay's default latency budget (p99 TTFT)


class OracleKeeper(ReplayPolicy):
    """Ground-truth anchor keeper on stock LRU (see the module docstring)."""

    name = "oracle"

    def __init__(self, keep_share: float, zone: float, guard: bool) -> None:
        self.keep_share, self.zone, self.guard = keep_share, zone, guard

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.agents: dict[str, list] = {}  # agent -> [anchor hashes, tokens, rate EWMA, last seen]
        self.running = RunningSet()
        self.block_tokens = max((max(r.block_tokens) for r in requests if r.block_tokens), default=16)
        self.guarded = 0

    def on_response(self, i, req, hit_blocks, now):
        self.running.remove(req.block_hashes)

    def on_request(self, i, req, now):
        pool = self.driver.engine.pool
        self.running.add(req.block_hashes, req.block_tokens)
        k = req.anchor_blocks
        if k:
            e = self.agents.get(req.agent or req.category)
            if e is None:
                self.agents[req.agent or req.category] = [req.block_hashes[:k], req.block_tokens[:k], 0.0, now]
            else:
                e[2] = 0.8 * e[2] + 0.2 / max(1e-3, now - e[3])
                e[3] = now
        if self.guard and self.running.tokens >= self.capacity * self.block_tokens:
            self.guarded += 1
            return
        budget = self.keep_share * self.capacity
        order = None
        for hashes, tokens, _rate, _last in sorted(self.agents.values(), key=lambda e: e[2], reverse=True):
            if len(hashes) > budget:
                continue
            budget -= len(hashes)
            if pool.match_prefix(hashes) < len(hashes):
                continue  # evicted: a touch would be a warm
            if order is None:
                order = {h: j for j, h in enumerate(pool.eviction_order(now))}
            if min(order.get(h, 1 << 60) for h in hashes) < self.zone * self.capacity:
                self.driver.submit_action("touch", "oracle", hashes, sum(tokens), now)
                order = None

    def extra(self):
        return {"guarded_requests": self.guarded}


def throughput_x(rec, lru, span: float) -> float:
    base = lru.throughput_at_budget(span, BUDGET_S)
    return rec.throughput_at_budget(span, BUDGET_S) / base if base else 1.0


def replanned_throughput(make, reqs, cap: int, cost: CostModel) -> float:
    """Largest rate (req/s) with p99 TTFT <= budget, the whole stream re-run at each rate."""

    def p99(scale: float) -> float:
        scaled = [dataclasses.replace(r, t=r.t / scale) for r in reqs]
        rec = runner.run_policy(make(), scaled, cap, cost)
        return float(np.percentile(rec.ttft, 99))

    lo, hi = 1e-3, 1.0
    while p99(hi) <= BUDGET_S and hi < 1e4:
        lo, hi = hi, hi * 2
    for _ in range(10):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if p99(mid) <= BUDGET_S else (lo, mid)
    return lo * len(reqs) / (reqs[-1].t - reqs[0].t)


def one(job: tuple) -> list[dict]:
    workload, seed, keep_share, zone, replan = job
    spec = preset(workload, seed=seed)
    reqs = generate(spec)
    cost = CostModel()
    s = runner.ReplaySettings(block_size=spec.block_size, latency_budget_s=BUDGET_S, cost=cost)
    span = reqs[-1].t - reqs[0].t
    rows = []
    for ci, c in enumerate(DEFAULT_WORKLOAD_CAPACITY.split(",")):
        cap = runner.resolve_capacity(c, reqs)
        makers = {
            "lru": lambda: runner.make_policy("lru", s),
            "history": lambda: runner.make_policy("history", s),
            "scout-proxy": lambda: runner.make_policy("scout-proxy", s),
            "oracle": lambda: OracleKeeper(keep_share, zone, guard=False),
            "oracle+guard": lambda: OracleKeeper(keep_share, zone, guard=True),
        }
        recs = {n: runner.run_policy(m(), reqs, cap, cost) for n, m in makers.items()}
        row = {"workload": workload, "seed": seed, "capacity": cap}
        for n, rec in recs.items():
            if n != "lru":
                row[f"{n}_thr_x"] = throughput_x(rec, recs["lru"], span)
                row[f"{n}_ttft_x"] = float(rec.latencies()[0].mean() / recs["lru"].latencies()[0].mean())
        if replan and ci == 1:  # the middle capacity: the slow measure on one capacity per cell
            base = replanned_throughput(makers["lru"], reqs, cap, cost)
            for n in ("history", "scout-proxy", "oracle+guard"):
                row[f"{n}_replanned_thr_x"] = replanned_throughput(makers[n], reqs, cap, cost) / base
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--workloads", default="selector,pipeline,swebench,gaia")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep-share", type=float, default=0.7, help="oracle: most of the cache its anchors may fill")
    ap.add_argument("--zone", type=float, default=0.5, help="oracle: touch anchors in this oldest share of the LRU")
    ap.add_argument("--replan-cells", type=int, default=0, help="slow re-run throughput for the first N jobs")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    seeds = [int(x) for x in args.seeds.split(",") if x]
    jobs = [(w, sd) for w in args.workloads.split(",") if w for sd in seeds]
    jobs = [(w, sd, args.keep_share, args.zone, k < args.replan_cells) for k, (w, sd) in enumerate(jobs)]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        rows = [r for rs in ex.map(one, jobs) for r in rs]
    names = ("history", "scout-proxy", "oracle", "oracle+guard")
    print("| workload | seed | cap | " + " | ".join(f"{n} thr × LRU" for n in names) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in names) + " |")
    for r in rows:
        cells = " | ".join(f"{r[f'{n}_thr_x']:.3f}" for n in names)
        print(f"| {r['workload']} | {r['seed']} | {r['capacity']} | {cells} |")
    print()
    for n in names:
        xs = [r[f"{n}_thr_x"] for r in rows]
        ts = [r[f"{n}_ttft_x"] for r in rows]
        print(
            f"{n:>14}: throughput × LRU mean {np.mean(xs):.3f} (min {min(xs):.3f}); "
            f"mean TTFT × LRU mean {np.mean(ts):.3f} (max {max(ts):.3f})"
        )
    rp = [r for r in rows if "history_replanned_thr_x" in r]
    if rp:
        print("\nre-planned throughput at budget (stream re-run at each rate), middle capacity:")
        for r in rp:
            got = ", ".join(f"{n} {r[f'{n}_replanned_thr_x']:.3f}" for n in ("history", "scout-proxy", "oracle+guard"))
            print(f"  {r['workload']} seed {r['seed']} cap {r['capacity']}: {got}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
