"""`cachescout replay --grid NAME --out DIR`: the headroom map over regimes (issue 21, items 3–4).

Why a grid: one preset at one capacity cannot say where a proxy can win. Headroom (how much
better the bound does than LRU) depends on the regime: load, cache size relative to what the
running requests hold, how long sessions pause on tools and how many sit idle. The grid sweeps those
as workload parameters (`workloads.WorkloadSpec.busy`, `pause_mix`, `gap_mix`; `regimes.py`) and
runs the replay (`runner.replay`, unchanged) in every cell:

- per preset and pause profile the sessions are generated once per busy level: the same sessions,
  pauses and think times, only the session-arrival rate differs (rate ∝ busy share);
- capacities are multiples of the running set's p90 (distinct blocks in flight) measured at the
  reference busy level, fixed along the busy axis (a deployment's cache does not grow with load);
  each cell also records the ratio at its own load;
- per cell: every policy's summary (the runner's keys), the headroom LRU → belady (and → the
  oracle keeper where the runner has it) in mean and tool-resume TTFT, and the share of each bound's
  gain each policy captures;
- re-planned throughput at the latency budget: the busy axis is a rate ladder at fixed capacity
  with tool pauses unchanged, every policy re-run at each rate; `throughput_replanned_rps` is the
  rate where p99 TTFT crosses the budget (log-interpolated between the last level inside and the
  first outside; extra levels above the top are run when a policy is still inside there). The
  runner's own `throughput_at_budget_rps` (compressed arrivals) is kept beside it.

Policies the runner does not know (e.g. `oracle-keeper` before the engine-model merge) are listed
in `results.unavailable_policies` and left out of the cells.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing
import sys
import time
from pathlib import Path

from proxy.replay import regimes
from proxy.replay.grid_specs import GRIDS, OWN_PAUSES, GridPreset, GridSpec, cost_for, ref_running_set, spec_for
from proxy.replay.runner import (
    BLIND_POLICIES,
    HINT_POLICIES,
    LANE_POLICIES,
    POLICIES,
    SESSION_POLICIES,
    ReplaySettings,
    replay,
)
from proxy.replay.workloads import generate

__all__ = [
    "GRIDS",
    "OWN_PAUSES",
    "GridPreset",
    "GridSpec",
    "cost_for",
    "crossing",
    "ref_running_set",
    "run_cli",
    "run_grid",
    "spec_for",
]

WANTED = (
    "lru",
    "history",
    "oracle-keeper",
    "oracle-keeper-blind",
    *SESSION_POLICIES,  # session references (session_refs.py): which paused session to keep
    "belady",
    "scout-proxy",
)
LEVEL_KEYS = ("preset", "pause", "busy", "requests", "busy_offered", "busy_offered_steady", "replay_s")
MIN_GAIN = 0.01  # a bound's gain below this share of LRU's TTFT is no gap: shares are None there


def available_policies(lanes: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    known = set(POLICIES) | set(HINT_POLICIES) | set(LANE_POLICIES) | set(BLIND_POLICIES) | set(SESSION_POLICIES)
    wanted = WANTED + (LANE_POLICIES if "slack" in lanes else ())
    return [p for p in wanted if p in known], [p for p in wanted if p not in known]


def _job(job: tuple) -> dict:
    """One (preset, pause, busy) level: every capacity and policy. Runs in a worker process.
    An 8th element `session` (bool) adds the session-lane runs (`grid_lanes.session_runs`)."""
    gp, pause, busy, seed, caps, policies, proxy_settings = job[:7]
    spec = spec_for(gp, pause, busy, seed)
    reqs = generate(spec)
    settings = ReplaySettings(
        block_size=spec.block_size, latency_budget_s=gp.budget_s, proxy_settings=proxy_settings, cost=cost_for(gp)
    )
    t0 = time.perf_counter()
    res = replay(reqs, caps, policies, settings)
    span = res["span_s"]
    rows = []
    for row in res["capacities"]:
        pols = {n: {k: v for k, v in s.items() if not k.startswith("_")} for n, s in row["policies"].items()}
        rows.append({"capacity_blocks": row["capacity_blocks"], "policies": pols})
    if len(job) > 7 and job[7]:
        from proxy.replay.grid_lanes import session_runs

        for row, lane in zip(rows, session_runs(reqs, spec, caps, settings, "scout-proxy-lane" in policies)):
            row["session_lane"] = lane
    return {
        "preset": gp.name,
        "pause": pause,
        "busy": busy,
        "requests": len(reqs),
        "span_s": span,
        "request_rate": len(reqs) / span if span > 0 else 0.0,
        **regimes.busy_share(reqs, settings.cost),
        "running_set": regimes.running_set(reqs, settings.cost),
        "occupancy": regimes.occupancy(reqs, settings.cost),
        "rows": rows,
        "replay_s": time.perf_counter() - t0,
    }


def _gain(lru: float | None, other: float | None) -> float | None:
    if lru is None or other is None or lru <= 0:
        return None
    return 1.0 - other / lru


def _share(lru: float | None, pol: float | None, bound: float | None) -> float | None:
    """Share of the bound's TTFT gain over LRU the policy captures (None without a gap)."""
    if lru is None or pol is None or bound is None or lru - bound < MIN_GAIN * lru:
        return None
    return (lru - pol) / (lru - bound)


def crossing(points: list[tuple[float, float]], budget: float) -> tuple[float, str | None]:
    """Rate where p99 TTFT crosses `budget` on a ladder of (request rate, p99) sorted by rate:
    log-interpolated between the last level inside and the first outside. Censored: 'below' (the
    lowest level is already outside: 0.0), 'above' (the highest is inside: its rate)."""
    if not points or points[0][1] > budget:
        return 0.0, "below"
    for (r0, p0), (r1, p1) in itertools.pairwise(points):
        if p1 > budget >= p0:
            lo, hi = math.log(max(p0, 1e-9)), math.log(p1)
            f = (math.log(budget) - lo) / (hi - lo) if hi > lo else 0.0
            return r0 + f * (r1 - r0), None
    return points[-1][0], "above"


def cell(level: dict, row: dict, gp: GridPreset, cache_x: float, ref_rs: int) -> dict:
    pols = row["policies"]
    lru, bel, orc = pols["lru"], pols["belady"], pols.get("oracle-keeper")
    rs90 = level["running_set"]["blocks_p90"]
    headroom = {
        "ttft_mean": _gain(lru["ttft_mean_s"], bel["ttft_mean_s"]),
        "ttft_resume_mean": _gain(lru.get("ttft_resume_mean_s"), bel.get("ttft_resume_mean_s")),
        "oracle_ttft_mean": _gain(lru["ttft_mean_s"], orc["ttft_mean_s"]) if orc else None,
        "oracle_ttft_resume_mean": _gain(lru.get("ttft_resume_mean_s"), orc.get("ttft_resume_mean_s")) if orc else None,
    }
    captured = {}
    for name, s in pols.items():
        captured[name] = {
            "of_belady_ttft_mean": _share(lru["ttft_mean_s"], s["ttft_mean_s"], bel["ttft_mean_s"]),
            "of_belady_ttft_resume": _share(
                lru.get("ttft_resume_mean_s"), s.get("ttft_resume_mean_s"), bel.get("ttft_resume_mean_s")
            ),
            "of_oracle_ttft_mean": _share(lru["ttft_mean_s"], s["ttft_mean_s"], orc["ttft_mean_s"]) if orc else None,
            "of_oracle_ttft_resume": _share(
                lru.get("ttft_resume_mean_s"), s.get("ttft_resume_mean_s"), orc.get("ttft_resume_mean_s")
            )
            if orc
            else None,
        }
    occ = level["occupancy"]
    return {
        "params": {
            "preset": gp.name,
            "pauses": level["pause"],
            "busy": level["busy"],
            "cache_x_running_set": cache_x,
            "capacity_blocks": row["capacity_blocks"],
            "sessions": gp.sessions,
            "latency_budget_s": gp.budget_s,
            "measured": {
                "running_set_blocks_p90_ref": ref_rs,
                "running_set_blocks_p90": rs90,
                "running_requests_mean": round(level["running_set"]["requests_mean"], 3),
                "capacity_over_running_set": round(row["capacity_blocks"] / rs90, 3) if rs90 else None,
                "sessions_live_mean": round(occ["sessions_live_mean"], 3),
                "sessions_idle_mean": round(occ["sessions_idle_mean"], 3),
                "sessions_tool_idle_mean": round(occ["sessions_tool_idle_mean"], 3),
                "busy_offered": round(level["busy_offered"], 4),
                "busy_offered_steady": None
                if level["busy_offered_steady"] is None
                else round(level["busy_offered_steady"], 4),
                "requests": level["requests"],
                "span_s": round(level["span_s"], 3),
                "request_rate": round(level["request_rate"], 4),
            },
        },
        "policies": pols,
        "headroom": headroom,
        "captured": captured,
    }


def _pool_map(jobs: list[tuple], n: int) -> list[dict]:
    if n <= 1 or len(jobs) <= 1:
        return [_job(j) for j in jobs]
    with multiprocessing.get_context("fork").Pool(min(n, len(jobs))) as pool:
        return pool.map(_job, jobs, chunksize=1)


def run_grid(
    name: str, jobs: int = 2, proxy_settings=None, log=None, grid: GridSpec | None = None, lanes: tuple[str, ...] = ()
) -> dict:
    """Every cell of the grid; returns the `results` dict (with `grid`, the list of cells).
    `lanes` (issue 24, `grid_lanes.py`): "slack" adds `scout-proxy-lane` to every cell; "session"
    adds the session-lane runs to the cells at busy 70–90% (`cell["session_lane"]`)."""
    g = grid or GRIDS[name]
    policies, unavailable = available_policies(lanes)
    say = log or (lambda _m: None)
    t0 = time.perf_counter()
    # capacities per (preset, pause): multiples of the running set at the reference busy
    caps: dict[tuple[str, str], tuple[list[int], int]] = {}
    for gp in g.presets:
        for pause in g.pauses:
            rs = ref_running_set(g, gp, pause)
            own = list(gp.capacity_blocks)
            caps[(gp.name, pause)] = (own or [max(1, round(x * rs)) for x in g.cache_x], rs)
    by_name = {gp.name: gp for gp in g.presets}
    main: list[tuple] = [
        (gp, pause, b, g.seed, caps[(gp.name, pause)][0], policies, proxy_settings)
        for gp in g.presets
        for pause in g.pauses
        for b in gp.busy or g.busy
    ]
    if "session" in lanes:
        from proxy.replay.grid_lanes import session_level

        main = [(*j, session_level(j[2])) for j in main]
    n_caps = sorted({len(c) for c, _ in caps.values()})
    say(f"grid {name}: {len(main)} levels × {'/'.join(map(str, n_caps))} capacities, policies {','.join(policies)}")
    levels = _pool_map(main, jobs)
    # re-planned throughput ladder: extra busy levels above the grid where a policy is still inside
    ladders: dict[tuple[str, str], list[dict]] = {}
    for lv in levels:
        ladders.setdefault((lv["preset"], lv["pause"]), []).append(lv)
    for extra in g.extra_busy:
        need = []
        for (pname, pause), lvls in ladders.items():
            gp = by_name[pname]
            top = max(lvls, key=lambda lv: lv["busy"])
            inside = [
                n
                for n in policies
                if any(row["policies"].get(n, {}).get("ttft_p99_s", math.inf) <= gp.budget_s for row in top["rows"])
            ]
            if inside and top["busy"] < extra:  # only the policies still inside the budget climb on
                need.append((gp, pause, extra, g.seed, caps[(pname, pause)][0], inside, proxy_settings))
        if need:
            say(f"grid {name}: throughput ladder at busy {extra} for {len(need)} (preset, pause) rows")
            for lv in _pool_map(need, jobs):
                ladders[(lv["preset"], lv["pause"])].append(lv)
    cells = []
    for lv in levels:
        gp = by_name[lv["preset"]]
        ladder = sorted(ladders[(lv["preset"], lv["pause"])], key=lambda x: x["busy"])
        _, ref_rs = caps[(lv["preset"], lv["pause"])]
        for k, row in enumerate(lv["rows"]):
            x = round(row["capacity_blocks"] / max(1, ref_rs), 3) if gp.capacity_blocks else g.cache_x[k]
            c = cell(lv, row, gp, x, ref_rs)
            if "session_lane" in row:
                c["session_lane"] = row["session_lane"]
            for pname, s in c["policies"].items():
                pts = [
                    (x["request_rate"], x["rows"][k]["policies"][pname]["ttft_p99_s"])
                    for x in ladder
                    if pname in x["rows"][k]["policies"]
                ]
                rate, censored = crossing(pts, gp.budget_s)
                s["throughput_replanned_rps"] = rate
                s["throughput_replanned_censored"] = censored
            lru_t = c["policies"]["lru"]["throughput_replanned_rps"]
            for s in c["policies"].values():
                s["throughput_replanned_x_lru"] = s["throughput_replanned_rps"] / lru_t if lru_t > 0 else None
            if "scout-proxy-lane" in c["policies"]:
                from proxy.replay.grid_lanes import slack_check

                c["slack_lane"] = slack_check(c)
            cells.append(c)
    return {
        "grid_name": name,
        "policies": policies,
        "unavailable_policies": unavailable,
        "axes": {
            "presets": [gp.name for gp in g.presets],
            "pauses": list(g.pauses),
            "busy": sorted({b for gp in g.presets for b in gp.busy or g.busy}),
            "cache_x_running_set": sorted({c["params"]["cache_x_running_set"] for c in cells})
            if any(gp.capacity_blocks for gp in g.presets)
            else list(g.cache_x),
            "ref_busy": g.ref_busy,
            "extra_busy": list(g.extra_busy),
            "pause_mixes": {p: regimes.PAUSES.get(p) for p in g.pauses},
            "gap_scale": {p: regimes.GAP_SCALE.get(p, 1.0) for p in g.pauses},
        },
        "ladder_levels": {f"{p}/{q}": sorted(x["busy"] for x in v) for (p, q), v in ladders.items()},
        "levels": [
            {k: lv[k] for k in LEVEL_KEYS} for lvs in ladders.values() for lv in sorted(lvs, key=lambda x: x["busy"])
        ],
        "grid": cells,
        **({"lanes": list(lanes)} if lanes else {}),
        **({"lanes_summary": _lanes_summary(cells)} if lanes else {}),
        "wall_s": round(time.perf_counter() - t0, 2),
        "jobs": jobs,
    }


def _lanes_summary(cells: list[dict]) -> dict:
    from proxy.replay.grid_lanes import summary

    return summary({"grid": cells})


def lane_names(spec: str | None) -> tuple[str, ...]:
    """`--lane slack|session|slack,session|all` → the lanes, in a fixed order."""
    if not spec:
        return ()
    want = {x.strip() for x in spec.split(",") if x.strip()}
    if "all" in want:
        want = {"slack", "session"}
    bad = want - {"slack", "session"}
    if bad:
        raise ValueError(f"--lane {spec!r}: expected slack, session, slack,session or all")
    return tuple(x for x in ("slack", "session") if x in want)


def run_cli(args: argparse.Namespace, proxy_settings=None) -> int:
    """The CLI's `--grid` path: run, write report.json / report.md / headroom_map.png, print a summary."""
    from proxy.replay.grid_report import markdown, picture

    say = (lambda m: None) if args.no_progress else (lambda m: print(m, file=sys.stderr))
    try:
        lanes = lane_names(getattr(args, "lane", None))
    except ValueError as exc:
        print(f"cachescout replay: {exc}", file=sys.stderr)
        return 2
    results = run_grid(args.grid, jobs=args.jobs, proxy_settings=proxy_settings, log=say, lanes=lanes)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plots: list[str] = []
    note = None
    if not args.no_plots:
        try:
            plots = [picture(results, out / "headroom_map.png")]
        except ImportError as exc:
            note = f"picture skipped: matplotlib unavailable ({exc}); install cachescout[plots]"
    lane_arg = f" --lane {','.join(lanes)}" if lanes else ""
    meta = {"title": f"grid {args.grid}", "command": f"cachescout replay --grid {args.grid}{lane_arg} --out {args.out}"}
    doc = {"meta": meta, "results": results, "plots": plots}
    (out / "report.json").write_text(json.dumps(doc, indent=1, default=float))
    (out / "report.md").write_text(markdown(results, meta, plots, note))
    big = [c["params"] for c in results["grid"] if (c["headroom"]["ttft_mean"] or 0) >= 0.10]
    print(
        f"grid {args.grid}: {len(results['grid'])} cells in {results['wall_s']:.1f} s; "
        f"{len(big)} with LRU→belady headroom >= 10% mean TTFT"
    )
    if results["unavailable_policies"]:
        print(f"unavailable in this runner: {', '.join(results['unavailable_policies'])}")
    print(f"report: {out / 'report.md'}")
    return 0
