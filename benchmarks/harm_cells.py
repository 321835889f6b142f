"""The grid cells where scout-proxy was > 1% worse than LRU, fast (issue 21; not a test).

    .venv/bin/python benchmarks/harm_cells.py [--seeds 0,1,2] [--jobs 2] [--cells all]
        [--variant NAME='{"disabled_pieces": "session_sweep"}' ...] [--json OUT]

Replays only the cells docs/results/replay-capture.md found systematically harmed (coding-agent `slow`
× 2 busy 0.7 / 0.9, gaia `fast` × 1 busy 0.5; `--cells all` adds the other six of the nine and two
the fixes left) with
`lru`, `scout-proxy` and each variant (scout-proxy with PolicyConfig overrides; default: the session
sweep off), at the grid's capacity (× the running set p90 of seed 0 at busy 0.7, as
`cachescout replay --grid default`), per seed. Prints per cell and seed the mean TTFT and per-turn
ratios to LRU and, per policy, the actions and per-signal yield. Seed 0 matches the grid's cell.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.replay.grid import GRIDS, ref_running_set, spec_for  # noqa: E402
from proxy.replay.runner import ReplaySettings, make_policy, run_policy  # noqa: E402
from proxy.replay.workloads import generate  # noqa: E402

HARM = [("coding-agent", "slow", 0.7, 2.0), ("coding-agent", "slow", 0.9, 2.0), ("gaia", "fast", 0.5, 1.0)]
OTHER = [
    ("coding-agent", "slow", 0.5, 2.0),
    ("gaia", "slow", 0.9, 4.0),
    ("gaia", "slow", 0.5, 2.0),
    ("gaia", "slow", 0.7, 2.0),
    ("gaia", "slow", 0.9, 1.0),
    ("swebench", "slow", 0.7, 4.0),
    ("gaia", "slow", 0.7, 4.0),  # > 1% worse than LRU on the lite grid after the issue-21 fixes
    ("swebench", "slow", 0.5, 1.0),
]
KEYS = ("ttft_mean_s", "turn_mean_s", "hit_rate", "ttft_resume_mean_s")


def _preset(name: str):
    return next(p for p in GRIDS["default"].presets if p.name == name)


def _cap(preset: str, pause: str, x: float) -> int:
    g = GRIDS["default"]
    rs = ref_running_set(g, _preset(preset), pause)
    return max(1, round(x * rs))


def _run(job: tuple) -> dict:
    cell, seed, cap, variant, over = job
    preset, pause, busy, _x = cell
    gp = _preset(preset)
    spec = spec_for(gp, pause, busy, seed)
    reqs = generate(spec)
    st = ReplaySettings(block_size=spec.block_size, latency_budget_s=gp.budget_s, scout_overrides=over)
    pol = make_policy("lru" if variant == "lru" else "scout-proxy", st)
    t0 = time.perf_counter()
    rec = run_policy(pol, reqs, cap, st.cost, None, st.engines, 0, st.block_size)
    span = reqs[-1].t - reqs[0].t
    summ = rec.summary(span, gp.budget_s)
    from proxy.replay.scout_hints import resume_latency

    summ.update(resume_latency(rec, reqs))
    out = {k: summ.get(k) for k in KEYS}
    out.update(cell=list(cell), seed=seed, variant=variant, secs=time.perf_counter() - t0, actions=summ["actions"])
    out["signals"] = {
        r: {
            k: round(v, 3) if isinstance(v, float) else v
            for k, v in s.items()
            if k in ("actions", "acted_tokens", "warm_tokens", "converted_tokens", "saved_s", "cost_s")
        }
        for r, s in summ["signals"].items()
    }
    if variant != "lru":
        ex = pol.extra()
        out["top_skips"] = ex.get("top_skips")
        out["held_back"] = ex.get("held_back")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cells", default="harm", choices=("harm", "all"))
    ap.add_argument("--variant", action="append", default=[], help="NAME=JSON overrides (scout-proxy)")
    ap.add_argument("--no-default-variant", action="store_true", help="skip the session-sweep-off variant")
    ap.add_argument("--json", default=None)
    ap.add_argument("-v", "--verbose", action="store_true", help="per-signal accounting")
    a = ap.parse_args()
    cells = HARM + (OTHER if a.cells == "all" else [])
    seeds = [int(s) for s in a.seeds.split(",")]
    variants: dict[str, dict] = {"lru": {}, "scout": {}}
    if not a.no_default_variant:
        variants["nosweep"] = {"disabled_pieces": "session_sweep"}
    for v in a.variant:
        name, _, js = v.partition("=")
        variants[name] = json.loads(js)
    caps = {(c[0], c[1], c[3]): _cap(c[0], c[1], c[3]) for c in cells}
    jobs = [(c, s, caps[(c[0], c[1], c[3])], n, o) for c in cells for s in seeds for n, o in variants.items()]
    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(a.jobs) as pool:
        res = pool.map(_run, jobs, chunksize=1)
    by = {(tuple(r["cell"]), r["seed"], r["variant"]): r for r in res}
    names = [n for n in variants if n != "lru"]
    print(f"{'cell':34} seed  " + "  ".join(f"{n + ' ttft/turn':>22}" for n in names))
    worst = {n: [0, 0] for n in names}
    for c in cells:
        for s in seeds:
            lru = by[(tuple(c), s, "lru")]
            row = []
            for n in names:
                r = by[(tuple(c), s, n)]
                t, u = r["ttft_mean_s"] / lru["ttft_mean_s"], r["turn_mean_s"] / lru["turn_mean_s"]
                worst[n][0] += t > 1.01
                worst[n][1] += u > 1.01
                row.append(f"{t:10.3f} {u:6.3f} ({sum(r['actions'].values()):3d})")
            print(f"{c[0]} {c[1]} x{c[3]:g} busy {c[2]:g}".ljust(34) + f"{s:4d}  " + "  ".join(f"{x:>22}" for x in row))
            if a.verbose:
                for n in names:
                    r = by[(tuple(c), s, n)]
                    print(
                        f"    {n}: signals {r['signals']}\n      skips {r.get('top_skips')} held {r.get('held_back')}"
                    )
    print("> 1% worse than LRU (ttft / turn): " + ", ".join(f"{n} {w[0]}/{w[1]}" for n, w in worst.items()))
    print(f"wall {time.perf_counter() - t0:.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
