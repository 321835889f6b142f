"""The `demo` grid's cells over seeds (issue 25; a benchmark, not a test; ~10 s).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/demo_grid_seeds.py [SEEDS]      # default 0,1,2,3,4

Prints, per cell of `cachescout replay --grid demo` (docs/demo.md "The matching replay cells"),
each policy's change vs LRU (median [min .. max] over the seeds) and scout-proxy's actions and skip
reasons; then, for scene 1 at the demo's busy share, LRU with a 100x cache (the lead's
infinite-cache ceiling run on the live demo) and scout-proxy with two planner settings changed
through `scout_overrides` (measurements of where its gap to the oracle keeper comes from, not
proposed defaults).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace

from proxy.replay.grid import GRIDS, cost_for, run_grid, spec_for
from proxy.replay.runner import ReplaySettings, replay
from proxy.replay.workloads import generate

POLICIES = ("belady", "oracle-keeper", "oracle-keeper-blind", "history", "scout-proxy")
KNOBS = {
    "default": {},
    "residency_stride=1": {"residency_stride": 1},
    "sweep_top_n=32": {"sweep_top_n": 32},
    "both": {"residency_stride": 1, "sweep_top_n": 32},
}


def spread(xs: list[float], k: float = 100.0) -> str:
    return f"{statistics.median(xs) * k:+.1f} [{min(xs) * k:+.1f} .. {max(xs) * k:+.1f}]"


def main(seeds: list[int]) -> None:
    rows: dict[str, list[dict]] = {}
    for seed in seeds:
        for c in run_grid("demo", jobs=1, grid=replace(GRIDS["demo"], seed=seed))["grid"]:
            p, pol = c["params"], c["policies"]
            rows.setdefault(f"{p['preset']} busy {p['busy']} cache {p['capacity_blocks']}", []).append(pol)
    for key, pols in rows.items():
        lru = [p["lru"] for p in pols]
        print(f"== {key}: LRU mean TTFT ms {[round(x['ttft_mean_s'] * 1e3) for x in lru]}")
        for n in POLICIES:
            ch = {
                m: [p[n][m] / p["lru"][m] - 1 for p in pols]
                for m in ("ttft_mean_s", "ttft_resume_mean_s", "turn_mean_s")
            }
            hit = [p[n]["hit_rate"] - p["lru"]["hit_rate"] for p in pols]
            print(
                f"  {n:20s} mean {spread(ch['ttft_mean_s'])}%  resume {spread(ch['ttft_resume_mean_s'])}%  "
                f"turn {spread(ch['turn_mean_s'])}%  hit {spread(hit)} pp"
            )
        print(f"  scout-proxy actions {[p['scout-proxy']['extra']['actions_emitted'] for p in pols]}")
        print(f"  scout-proxy skips   {[p['scout-proxy']['extra']['top_skips'] for p in pols]}")
    gp = GRIDS["demo"].presets[0]
    cap = gp.capacity_blocks[0]
    ceiling, knobs = [], {k: [] for k in KNOBS}
    for seed in seeds:
        reqs = generate(spec_for(gp, "own", 0.22, seed))
        base = ReplaySettings(block_size=16, latency_budget_s=gp.budget_s, cost=cost_for(gp))
        a, b = (r["policies"]["lru"] for r in replay(reqs, [cap, 100 * cap], ["lru"], base)["capacities"])
        ceiling.append((b["ttft_mean_s"] / a["ttft_mean_s"] - 1, b["ttft_resume_mean_s"] / a["ttft_resume_mean_s"] - 1))
        for k, over in KNOBS.items():
            r = replay(reqs, [cap], ["scout-proxy", "oracle-keeper"], replace(base, scout_overrides=over))
            p = r["capacities"][0]["policies"]
            lru, sp, orc = p["lru"]["ttft_mean_s"], p["scout-proxy"]["ttft_mean_s"], p["oracle-keeper"]["ttft_mean_s"]
            knobs[k].append(
                (sp / lru - 1, (lru - sp) / (lru - orc), sum(p["scout-proxy"]["extra"]["actions_emitted"].values()))
            )
    print(
        f"== scene 1, LRU with a {100 * cap}-block cache: mean {spread([x[0] for x in ceiling])}%, "
        f"resume {spread([x[1] for x in ceiling])}%"
    )
    for k, xs in knobs.items():
        print(
            f"== scene 1, scout-proxy {k:20s} mean TTFT {spread([x[0] for x in xs])}%  "
            f"share of the oracle's gain {spread([x[1] for x in xs])}%  actions {[x[2] for x in xs]}"
        )


if __name__ == "__main__":
    main([int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "0,1,2,3,4").split(",")])
