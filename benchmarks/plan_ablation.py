"""Ablation of the planner's pieces on the headroom grid (issue 26 item 4; not a test).

    .venv/bin/python benchmarks/plan_ablation.py [--grid quick|default] [--jobs 2] [--out DIR]
                                                 [--pieces tool_resume,cooldown]

Runs ``cachescout replay --grid`` once with every piece on, then once per piece with that piece
switched off (``PolicyConfig.disabled_pieces`` through ``CACHESCOUT_POLICY_OVERRIDES``, which the
grid's scout policies read), and prints, per piece: the lines of code behind it (approximate:
the function or class that implements it), the cells where scout-proxy's mean TTFT got worse or
better than with the piece on (> 1%), and the worst and best ratio. A piece whose removal changes
nothing, or helps, in every cell is a candidate for removal (docs/policy.md, "The planner pipeline").
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.core.plan_registry import NAMES as PIECES  # noqa: E402
from proxy.core.plan_registry import PIECES as REGISTERED  # noqa: E402

# where each piece lives, for its line count: its class (plan_registry.PIECES)
IMPL = {p.name: p for p in REGISTERED}


def lines(piece: str) -> int | None:
    obj = IMPL.get(piece)
    return len(inspect.getsource(obj).splitlines()) if obj is not None else None


def grid(preset: str, jobs: int, out: Path, disabled: str) -> list[tuple[str, float]]:
    """(cell label, scout-proxy mean TTFT) per grid cell."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if disabled:
        env["CACHESCOUT_POLICY_OVERRIDES"] = json.dumps({"disabled_pieces": disabled})
    cmd = [sys.executable, "-m", "proxy.cli", "replay", "--grid", preset, "--jobs", str(jobs), "--out", str(out)]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    cells = json.loads((out / "report.json").read_text())["results"]["grid"]
    rows = []
    for c in cells:
        p = c["params"]
        label = f"{p['preset']}/{p['pauses']}/busy{p['busy']}/x{p['cache_x_running_set']}"
        rows.append((label, float(c["policies"]["scout-proxy"]["ttft_mean_s"])))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="quick", choices=("quick", "default"))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default="ablation-out")
    ap.add_argument("--pieces", default=",".join(PIECES), help="comma list (default: every piece)")
    args = ap.parse_args()
    out = Path(args.out)
    base = dict(grid(args.grid, args.jobs, out / "all-on", ""))
    table = []
    for piece in [p.strip() for p in args.pieces.split(",") if p.strip()]:
        cells = grid(args.grid, args.jobs, out / f"off-{piece}", piece)
        ratios = {label: ttft / base[label] for label, ttft in cells if base.get(label)}
        worse = sum(r > 1.01 for r in ratios.values())
        better = sum(r < 0.99 for r in ratios.values())
        row = {
            "piece": piece,
            "lines": lines(piece),
            "cells": len(ratios),
            "worse_without": worse,
            "better_without": better,
            "worst_ratio": round(max(ratios.values()), 4) if ratios else None,
            "best_ratio": round(min(ratios.values()), 4) if ratios else None,
        }
        table.append(row)
        print(json.dumps(row), flush=True)
    (out / "ablation.json").write_text(json.dumps(table, indent=2))
    print("| piece | lines | cells worse without it (>1%) | cells better without it | worst | best |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in table:
        print(
            f"| {r['piece']} | {r['lines'] or '-'} | {r['worse_without']}/{r['cells']} | "
            f"{r['better_without']}/{r['cells']} | {r['worst_ratio']} | {r['best_ratio']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
