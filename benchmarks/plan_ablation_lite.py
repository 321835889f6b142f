"""The planner ablation on the default headroom grid, light (issue 26 item 4; not a test).

    .venv/bin/python benchmarks/plan_ablation_lite.py OUT_DIR [--pieces a,b] [--jobs 2]

Like ``plan_ablation.py`` but per grid level it replays only ``lru`` and ``scout-proxy`` (pinned
Belady is swapped for LRU: its figures are not read here) and skips the throughput ladder, so a
piece takes ~3-5 min on 2 cores instead of ~20. Writes OUT_DIR/base.json and OUT_DIR/<piece>.json
(per cell: lru and scout-proxy mean TTFT, per-turn, hit rate) and prints the table of
docs/policy.md "Ablation on the headroom grid": per piece switched off, the cells that changed,
the cells > 1% worse / better than the full planner, and the cells > 1% worse than LRU.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import proxy.replay.runner as runner  # noqa: E402
from proxy.core.plan_registry import NAMES as PIECES  # noqa: E402
from proxy.replay.grid import GRIDS, ref_running_set, spec_for  # noqa: E402
from proxy.replay.workloads import generate  # noqa: E402

POLS = ["scout-proxy"]  # lru and belady always run in the runner
KEYS = ("ttft_mean_s", "turn_mean_s", "hit_rate")
_make = runner.make_policy


def _cheap(name: str, s: runner.ReplaySettings) -> runner.ReplayPolicy:
    return _make("lru" if name == "belady" else name, s)  # belady's figures are not read here


def _level(job: tuple) -> list[dict]:
    gp, pause, busy, caps, over = job
    runner.make_policy = _cheap
    spec = spec_for(gp, pause, busy, 0)
    st = runner.ReplaySettings(block_size=spec.block_size, latency_budget_s=gp.budget_s, scout_overrides=over)
    res = runner.replay(generate(spec), caps, POLS, st)
    out = []
    for k, row in enumerate(res["capacities"]):
        p = row["policies"]
        cell = {"preset": gp.name, "pause": pause, "busy": busy, "cap_i": k}
        cell.update({f"{n}_{m}": p[n][m] for n in ("lru", "scout-proxy") for m in KEYS})
        out.append(cell)
    return out


def run(over: dict, jobs: int) -> list[dict]:
    g = GRIDS["default"]
    work = []
    for gp in g.presets:
        for pause in g.pauses:
            rs = ref_running_set(g, gp, pause, 0)
            caps = [max(1, round(x * rs)) for x in g.cache_x]
            work += [(gp, pause, b, caps, over) for b in g.busy]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        return [c for cells in pool.map(_level, work, chunksize=1) for c in cells]


def _key(c: dict) -> tuple:
    return (c["preset"], c["pause"], c["busy"], c["cap_i"])


def table(base: list[dict], runs: dict[str, list[dict]]) -> list[str]:
    b = {_key(c): c for c in base}

    def harm(cells: list[dict]) -> tuple[int, int]:
        t = sum(c["scout-proxy_ttft_mean_s"] > 1.01 * b[_key(c)]["lru_ttft_mean_s"] for c in cells)
        u = sum(c["scout-proxy_turn_mean_s"] > 1.01 * b[_key(c)]["lru_turn_mean_s"] for c in cells)
        return t, u

    h0 = harm(base)
    lines = [
        "| piece switched off | cells changed | > 1% worse / > 1% better than the full planner (mean TTFT) "
        f"| mean change | cells > 1% worse than LRU, mean TTFT / per-turn (full planner: {h0[0]} / {h0[1]}) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for piece, cells in runs.items():
        d = [c["scout-proxy_ttft_mean_s"] / b[_key(c)]["scout-proxy_ttft_mean_s"] - 1 for c in cells]
        h = harm(cells)
        lines.append(
            f"| `{piece}` | {sum(abs(x) > 1e-9 for x in d)} of {len(d)} | {sum(x > 0.01 for x in d)} / "
            f"{sum(x < -0.01 for x in d)} | {100 * statistics.mean(d):+.2f}% | {h[0]} / {h[1]} |"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--pieces", default=",".join(p for p in PIECES if p not in ("runtime_hints", "host_tier")))
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    def cached(name: str, over: dict) -> list[dict]:
        f = out / f"{name}.json"
        if not f.exists():
            f.write_text(json.dumps({"overrides": over, "cells": run(over, a.jobs)}))
        return json.loads(f.read_text())["cells"]

    base = cached("base", {})
    runs = {p: cached(p, {"disabled_pieces": p}) for p in a.pieces.split(",") if p}
    print("\n".join(table(base, runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
