"""The default headroom grid, lite: scout-proxy variants against LRU and the oracle keeper (issue 21).

    .venv/bin/python benchmarks/grid_lite.py OUT_DIR [--variant NAME='{"successor_contexts": 8}' ...]
        [--jobs 2] [--seed 0]

Per cell of `cachescout replay --grid default` (96 cells, same streams and capacities, no
throughput ladder): `lru` and `oracle-keeper` once (OUT_DIR/ref.json, reused), and `scout-proxy`
with each variant's PolicyConfig overrides (OUT_DIR/<name>.json, reused; default variant `scout`:
no overrides). Prints per variant and preset: the cells where the oracle keeper gains >= 10% mean
TTFT over LRU, scout-proxy's share of that gain (median, min to max), the cells where scout-proxy is
> 1% worse than LRU in mean TTFT / per-turn latency, and the mean scout-proxy / LRU TTFT. Run it
from another tree (PYTHONPATH=that tree) to get that tree's figures for the same cells.
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

from proxy.replay.grid import GRIDS, ref_running_set, spec_for  # noqa: E402
from proxy.replay.runner import ReplaySettings, make_policy, run_policy  # noqa: E402
from proxy.replay.workloads import generate  # noqa: E402

KEYS = ("ttft_mean_s", "turn_mean_s", "hit_rate")


def _job(job: tuple) -> list[dict]:
    gp, pause, busy, seed, caps, policy, over = job
    spec = spec_for(gp, pause, busy, seed)
    reqs = generate(spec)
    st = ReplaySettings(block_size=spec.block_size, latency_budget_s=gp.budget_s, scout_overrides=over)
    span = reqs[-1].t - reqs[0].t
    out = []
    for k, cap in enumerate(caps):
        rec = run_policy(make_policy(policy, st), reqs, cap, st.cost, None, st.engines, 0, st.block_size)
        s = rec.summary(span, gp.budget_s)
        out.append({"preset": gp.name, "pause": pause, "busy": busy, "cap_i": k, **{m: s[m] for m in KEYS}})
    return out


def run(policies: list[str], over: dict, jobs: int, seed: int) -> dict[str, list[dict]]:
    g = GRIDS["default"]
    work = []
    for gp in g.presets:
        for pause in g.pauses:
            rs = ref_running_set(g, gp, pause)
            caps = [max(1, round(x * rs)) for x in g.cache_x]
            work += [(gp, pause, b, seed, caps, p, over) for b in g.busy for p in policies]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        res = pool.map(_job, work, chunksize=1)
    out: dict[str, list[dict]] = {p: [] for p in policies}
    for job, cells in zip(work, res, strict=True):
        out[job[5]] += cells
    return out


def _key(c: dict) -> tuple:
    return (c["preset"], c["pause"], c["busy"], c["cap_i"])


def table(ref: dict[str, list[dict]], runs: dict[str, list[dict]]) -> list[str]:
    lru = {_key(c): c for c in ref["lru"]}
    orc = {_key(c): c for c in ref["oracle-keeper"]}
    lines = [
        "| variant | preset | cells oracle >= 10% | share of the oracle's gain, median (min to max) "
        "| cells > 1% worse than LRU: mean TTFT / per-turn | mean scout/LRU TTFT |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, cells in runs.items():
        presets = list(dict.fromkeys(c["preset"] for c in cells))
        for preset in [*presets, "all"]:
            cs = [c for c in cells if preset in ("all", c["preset"])]
            shares, worse_t, worse_u, ratio = [], 0, 0, []
            for c in cs:
                lt, ot = lru[_key(c)]["ttft_mean_s"], orc[_key(c)]["ttft_mean_s"]
                if lt - ot >= 0.10 * lt:
                    shares.append((lt - c["ttft_mean_s"]) / (lt - ot))
                worse_t += c["ttft_mean_s"] > 1.01 * lt
                worse_u += c["turn_mean_s"] > 1.01 * lru[_key(c)]["turn_mean_s"]
                ratio.append(c["ttft_mean_s"] / lt)
            sh = (
                f"{100 * statistics.median(shares):.0f}% ({100 * min(shares):.0f}% to {100 * max(shares):.0f}%)"
                if shares
                else "-"
            )
            lines.append(
                f"| {name} | {preset} | {len(shares)} of {len(cs)} | {sh} | {worse_t} / {worse_u} "
                f"| {statistics.mean(ratio):.4f} |"
            )
    return lines


def harm_cells(ref: dict[str, list[dict]], runs: dict[str, list[dict]]) -> list[str]:
    """Every cell > 1% worse than LRU in some variant, with each variant's ratios."""
    lru = {_key(c): c for c in ref["lru"]}
    by = {n: {_key(c): c for c in cells} for n, cells in runs.items()}
    bad = sorted(
        {
            k
            for cells in by.values()
            for k, c in cells.items()
            if c["ttft_mean_s"] > 1.01 * lru[k]["ttft_mean_s"] or c["turn_mean_s"] > 1.01 * lru[k]["turn_mean_s"]
        }
    )
    out = []
    for k in bad:
        ratios = (
            (n, by[n][k]["ttft_mean_s"] / lru[k]["ttft_mean_s"], by[n][k]["turn_mean_s"] / lru[k]["turn_mean_s"])
            for n in by
        )
        row = "  ".join(f"{n} {t:.3f}/{u:.3f}" for n, t, u in ratios)
        out.append(f"{k[0]} {k[1]} x{GRIDS['default'].cache_x[k[3]]:g} busy {k[2]:g}: {row}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--variant", action="append", default=[], help="NAME=JSON PolicyConfig overrides")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    variants = dict(v.partition("=")[::2] for v in a.variant) or {"scout": "{}"}

    def cached(name: str, policies: list[str], over: dict) -> dict[str, list[dict]]:
        f = out / f"{name}.json"
        if not f.exists():
            f.write_text(json.dumps({"overrides": over, "cells": run(policies, over, a.jobs, a.seed)}))
        return json.loads(f.read_text())["cells"]

    ref = cached("ref", ["lru", "oracle-keeper"], {})
    runs = {n: cached(n, ["scout-proxy"], json.loads(js))["scout-proxy"] for n, js in variants.items()}
    print("\n".join(table(ref, runs)))
    print("\n".join(harm_cells(ref, runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
