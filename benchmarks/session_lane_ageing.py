"""The session lane's `continue` under its ageing bound (issue 24; a benchmark, not a test).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/session_lane_ageing.py 0 2 ageing.jsonl 1,3,10,30,60 &
    PYTHONPATH=$PWD .venv/bin/python benchmarks/session_lane_ageing.py 1 2 ageing.jsonl 1,3,10,30,60 &
    wait; PYTHONPATH=$PWD .venv/bin/python benchmarks/session_lane_ageing.py table ageing.jsonl

Where `continue` (program-level FCFS) shortens sessions at all, the default grid's cache ×1 cells at
busy 0.7–0.9, it does so by holding new sessions back, so the bound that keeps a new session's first
call from starving (`session_priority_ageing_s`: ordered behind at most that many seconds of later
arrivals) also gives back the gain. This prints, per cell, session completion and first-call p99 TTFT
vs the FCFS run for each bound and without one (closed loop on `lru`, as `grid_lanes.session_runs`),
and the issue's target (−20% completion with first-call p99 ≤ +25%) met or not. ~3 min here.
"""

from __future__ import annotations

import json
import sys

from proxy.replay.grid import GRIDS, ref_running_set, spec_for
from proxy.replay.lanes import session_links, session_metrics
from proxy.replay.runner import ReplaySettings, make_policy, run_policy
from proxy.replay.workloads import generate

UNBOUNDED = 1e9  # seconds: no bound in effect


def _cell(reqs, spec, cap, st, mode: str, ageing_s: float, links) -> dict:
    lane = {"mode": mode, "links": links, "ageing_s": ageing_s}
    rec = run_policy(make_policy("lru", st), reqs, cap, st.cost, None, 1, 0, spec.block_size, lane)
    return session_metrics(reqs, rec)


def run(part: int, parts: int, out: str, bounds: list[float]) -> None:
    g = GRIDS["default"]
    levels = [(gp, pause, b) for b in (0.9, 0.7) for gp in g.presets for pause in g.pauses]
    for k, (gp, pause, busy) in enumerate(levels):
        if k % parts != part:
            continue
        cap = max(1, round(ref_running_set(g, gp, pause)))
        spec = spec_for(gp, pause, busy, g.seed)
        reqs = generate(spec)
        st = ReplaySettings(block_size=spec.block_size, latency_budget_s=gp.budget_s)
        links = session_links(reqs, spec.prefill_tokens_per_s, spec.decode_tokens_per_s)
        res = {"fcfs": _cell(reqs, spec, cap, st, "fcfs", UNBOUNDED, links)}
        for a in [*bounds, UNBOUNDED]:
            res[str(a)] = _cell(reqs, spec, cap, st, "continue", a, links)
        with open(out, "a") as f:
            f.write(json.dumps({"preset": gp.name, "pause": pause, "busy": busy, "runs": res}) + "\n")
        print(gp.name, pause, busy, flush=True)


def table(path: str) -> None:
    with open(path) as f:
        cells = [json.loads(line) for line in f]
    cells.sort(key=lambda c: (c["preset"], c["pause"], c["busy"]))
    keys = [k for k in cells[0]["runs"] if k != "fcfs"]
    names = ["none" if float(k) >= UNBOUNDED else f"{float(k):g} s" for k in keys]
    print("| preset | pauses | busy | FCFS session s | FCFS first-call p99 s | " + " | ".join(names) + " |")
    print("| --- " * (5 + len(keys)) + "|")
    met = dict.fromkeys(keys, 0)
    for c in cells:
        b = c["runs"]["fcfs"]
        row = []
        for k in keys:
            r = c["runs"][k]
            dc = r["session_completion_mean_s"] / b["session_completion_mean_s"] - 1
            dp = r["first_call_ttft_p99_s"] / b["first_call_ttft_p99_s"] - 1
            met[k] += dc <= -0.20 and dp <= 0.25
            row.append(f"{100 * dc:+.1f}% / {100 * dp:+.0f}%")
        head = f"| {c['preset']} | {c['pause']} | {c['busy']} | {b['session_completion_mean_s']:.1f} | "
        print(head + f"{b['first_call_ttft_p99_s']:.2f} | " + " | ".join(row) + " |")
    print()
    counts = ", ".join(f"{n} {met[k]}" for n, k in zip(names, keys, strict=True))
    print(f"target met (−20% completion, first-call p99 ≤ +25%): {counts}")


if __name__ == "__main__":
    if sys.argv[1] == "table":
        table(sys.argv[2])
    else:
        run(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], [float(x) for x in sys.argv[4].split(",")])
