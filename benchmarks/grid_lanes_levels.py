"""The lanes on the default grid, one level at a time (issue 24; a benchmark, not a test).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/grid_lanes_levels.py run 0 2 lanes.jsonl &   # two halves,
    PYTHONPATH=$PWD .venv/bin/python benchmarks/grid_lanes_levels.py run 1 2 lanes.jsonl &   # in parallel
    PYTHONPATH=$PWD .venv/bin/python benchmarks/grid_lanes_levels.py table lanes.jsonl

(`run PART PARTS OUT SEED`: another workload seed than the grid's 0.)

`cachescout replay --grid default --lane all` gives the full cells (every policy, re-planned
throughput, report.md), but returns nothing until all 32 levels are done. This script runs a
reduced set per (preset, pause, busy) level of the same grid and appends each level to a jsonl as
soon as it is done (busy 0.9 and 0.7 first), so a shared machine's partial run is usable: at the
grid's three capacities `lru`, `scout-proxy`, `scout-proxy-lane` and `oracle-keeper` (open loop,
as the grid's cells) and, at busy 70–90%, the session lane on `lru` (closed loop, FCFS / continue
/ las: `grid_lanes.session_runs`). Not measured here: re-planned throughput (the grid's ladder).
`table` prints the per-cell tables and the acceptance counts (docs/replay.md "Lanes on the grid").
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from proxy.replay.grid import GRIDS, ref_running_set, spec_for
from proxy.replay.grid_lanes import session_runs
from proxy.replay.runner import ReplaySettings, make_policy, run_policy
from proxy.replay.workloads import generate

POLICIES = ("lru", "scout-proxy", "scout-proxy-lane", "oracle-keeper")
KEYS = ("hit_rate", "ttft_mean_s", "ttft_p99_s", "turn_mean_s")


def run(part: int, parts: int, out: str, seed: int | None = None) -> None:
    g = GRIDS["default"]
    seed = g.seed if seed is None else seed  # the grid's seed unless given
    levels = [(gp, pause, b) for b in sorted(g.busy, reverse=True) for gp in g.presets for pause in g.pauses]
    caps_of: dict[tuple[str, str], list[int]] = {}
    for k, (gp, pause, busy) in enumerate(levels):
        if k % parts != part:
            continue
        if (gp.name, pause) not in caps_of:
            rs = ref_running_set(g, gp, pause, seed)
            caps_of[(gp.name, pause)] = [max(1, round(x * rs)) for x in g.cache_x]
        caps = caps_of[(gp.name, pause)]
        spec = spec_for(gp, pause, busy, seed)
        reqs = generate(spec)
        st = ReplaySettings(block_size=spec.block_size, latency_budget_s=gp.budget_s)
        t0 = time.time()
        rows = []
        for x, cap in zip(g.cache_x, caps, strict=True):
            pols = {}
            for n in POLICIES:
                pol = make_policy(n, st)
                rec = run_policy(pol, reqs, cap, st.cost, None, 1, 0, spec.block_size)
                s = rec.summary(reqs[-1].t - reqs[0].t, gp.budget_s)
                ex = pol.extra() if n.startswith("scout") else {}
                pols[n] = {k: s[k] for k in KEYS} | {"executed": ex.get("executed")}
            rows.append({"cache_x": x, "capacity_blocks": cap, "policies": pols})
        if 0.7 <= busy <= 0.9:
            for row, lane in zip(rows, session_runs(reqs, spec, caps, st, False), strict=True):
                row["session_lane"] = lane
        level = {"preset": gp.name, "pause": pause, "busy": busy, "rows": rows, "wall_s": round(time.time() - t0, 1)}
        with open(out, "a") as f:
            f.write(json.dumps(level) + "\n")
        print(gp.name, pause, busy, level["wall_s"], flush=True)


def _share(lru: float, pol: float, bound: float) -> float | None:
    return None if lru - bound < 0.01 * lru else (lru - pol) / (lru - bound)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.0f}%"


def table(paths: list[str]) -> None:
    levels = []
    for path in paths:
        with open(path) as f:
            levels += [json.loads(line) for line in f]
    order = {gp.name: i for i, gp in enumerate(GRIDS["default"].presets)}
    levels.sort(key=lambda r: (order[r["preset"]], r["pause"], r["busy"]))
    cells = []
    for r in levels:
        for row in r["rows"]:
            p = row["policies"]
            lru, s0, s1, o = (p[n]["ttft_mean_s"] for n in POLICIES)
            turn = [p[n]["turn_mean_s"] / p["lru"]["turn_mean_s"] for n in ("scout-proxy", "scout-proxy-lane")]
            cells.append(
                {
                    **{k: r[k] for k in ("preset", "pause", "busy")},
                    "x": row["cache_x"],
                    "lru": lru,
                    "t": (s0 / lru, s1 / lru),
                    "u": tuple(turn),
                    "c": (_share(lru, s0, o), _share(lru, s1, o)),
                    "oracle": 1 - o / lru,
                    "acts": (p["scout-proxy"]["executed"], p["scout-proxy-lane"]["executed"]),
                    "session": row.get("session_lane"),
                }
            )
    worse = [[c for c in cells if max(c["t"][j], c["u"][j]) > 1.01] for j in (0, 1)]
    print(
        f"{len(levels)} levels, {len(cells)} cells; > 1% worse than LRU in mean TTFT or per-turn: "
        f"no lane {len(worse[0])}, lane {len(worse[1])}"
    )
    for label, sel in (("all", cells), ("busy 70-90%", [c for c in cells if c["busy"] >= 0.7])):
        both = [c for c in sel if c["c"][0] is not None]
        if both:
            more = sum(c["c"][1] > c["c"][0] + 1e-9 for c in both)
            less = sum(c["c"][1] < c["c"][0] - 1e-9 for c in both)
            med = [statistics.median(c["c"][j] for c in both) for j in (0, 1)]
            print(
                f"captured of the oracle's gain ({label}, {len(both)} cells with a gain >= 1%): lane more in "
                f"{more}, less in {less}; median {_pct(med[0])} without, {_pct(med[1])} with"
            )
    print()
    print(
        "| preset | pauses | cache× | busy | LRU TTFT ms | TTFT × LRU no lane / lane | turn × LRU no lane / lane "
        "| oracle headroom | captured no lane / lane | actions no lane / lane | lane ≤ 1% worse |"
    )
    print("|" + " --- |" * 11)
    for c in cells:
        ok = "yes" if max(c["t"][1], c["u"][1]) <= 1.01 else "**no**"
        print(
            f"| {c['preset']} | {c['pause']} | {c['x']:g} | {c['busy']:g} | {1000 * c['lru']:.0f} | "
            f"{c['t'][0]:.3f} / {c['t'][1]:.3f} | {c['u'][0]:.3f} / {c['u'][1]:.3f} | {_pct(c['oracle'])} | "
            f"{_pct(c['c'][0])} / {_pct(c['c'][1])} | {c['acts'][0]} / {c['acts'][1]} | {ok} |"
        )
    sess = [c for c in cells if c["session"]]
    if not sess:
        return
    print()
    print(
        "| preset | pauses | cache× | busy | FCFS session s | FCFS first-call p99 s "
        "| continue: completion / first-call p99 | las: completion / first-call p99 |"
    )
    print("|" + " --- |" * 8)
    stats: dict[str, list] = {"lru/continue": [], "lru/las": []}
    for c in sess:
        s = c["session"]
        fc = s["runs"]["lru/fcfs"]
        row = [
            c["preset"],
            c["pause"],
            f"{c['x']:g}",
            f"{c['busy']:g}",
            f"{fc['session_completion_mean_s']:.1f}",
            f"{fc['first_call_ttft_p99_s']:.2f}",
        ]
        for m in stats:
            v = s["vs_fcfs"].get(m)
            if v is None:
                row.append(f"error: {s['runs'][m].get('error', '?')}")
                continue
            stats[m].append(v)
            row.append(f"{100 * v['session_completion_mean']:+.1f}% / {100 * v['first_call_ttft_p99']:+.0f}%")
        print("| " + " | ".join(row) + " |")
    print()
    for m, vs in stats.items():
        if not vs:
            continue
        comp = [v["session_completion_mean"] for v in vs]
        fp = [v["first_call_ttft_p99"] for v in vs]
        met = sum(a <= -0.20 and b <= 0.25 for a, b in zip(comp, fp, strict=True))
        print(
            f"{m}: target met in {met} of {len(vs)} cells; session completion median "
            f"{100 * statistics.median(comp):+.1f}% "
            f"(best {100 * min(comp):+.1f}%, worst {100 * max(comp):+.1f}%); first-call p99 median "
            f"{100 * statistics.median(fp):+.0f}% (worst {100 * max(fp):+.0f}%)"
        )


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]) if len(sys.argv) > 5 else None)
    else:
        table(sys.argv[2:])
