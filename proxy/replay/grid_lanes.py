"""The lanes on the headroom grid (issue 24): `cachescout replay --grid NAME --lane slack,session`.

- `slack`: `scout-proxy-lane` (lanes.py) runs in every cell beside `scout-proxy`, with the same
  keys, captured shares and re-planned throughput. `slack_check` reads the acceptance per cell:
  never more than 1% worse than LRU in mean TTFT, per-turn latency or re-planned throughput, and the
  share of the oracle keeper's gain captured with the lane vs without.
- `session`: in the cells at busy 70–90% (`SESSION_BUSY`), every capacity is re-run with closed-loop
  session timing (`lanes.SessionLaneDriver`) under FCFS and under each session-lane mode, for
  `lru` (the order alone) and, with the slack lane on, for the product: `scout-proxy` on FCFS vs
  `scout-proxy-lane` with the session lane (live, the session lane acts only with the slack lane).
  `cell["session_lane"]`: `runs.<policy>/<mode>` (session completion, first-call TTFT, TTFT,
  per-turn, hit rate) and `vs_fcfs.<policy>/<mode>` (change vs that policy family's FCFS run).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from proxy.replay.lanes import DEFAULT_AGEING_S, session_links, session_metrics
from proxy.replay.runner import ReplaySettings, make_policy, run_policy
from proxy.replay.traces import ReplayRequest

SESSION_BUSY = (0.7, 0.9)  # the "70–90% load"
MODES = ("continue", "las")
WORSE = 0.01  # the acceptance: never more than 1% worse than LRU


def session_level(busy: float) -> bool:
    return SESSION_BUSY[0] - 1e-9 <= busy <= SESSION_BUSY[1] + 1e-9


def _runs(with_scout: bool) -> list[tuple[str, str, str]]:
    """(name, policy, mode); the name's family before '/' is the FCFS baseline's."""
    out = [("lru/fcfs", "lru", "fcfs")] + [(f"lru/{m}", "lru", m) for m in MODES]
    if with_scout:
        out += [("scout-proxy/fcfs", "scout-proxy", "fcfs"), ("scout-proxy-lane/fcfs", "scout-proxy-lane", "fcfs")]
        out += [(f"scout-proxy-lane/{m}", "scout-proxy-lane", m) for m in MODES]
    return out


def _baseline(name: str) -> str:
    return "scout-proxy/fcfs" if name.startswith("scout-proxy") else "lru/fcfs"


def _change(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old <= 0:
        return None
    return new / old - 1.0


def session_runs(
    requests: Sequence[ReplayRequest],
    spec,
    caps: Sequence[int],
    settings: ReplaySettings,
    with_scout: bool,
    ageing_s: float = DEFAULT_AGEING_S,
) -> list[dict]:
    """Per capacity: the closed-loop runs and their change vs FCFS."""
    links = session_links(requests, spec.prefill_tokens_per_s, spec.decode_tokens_per_s)
    out = []
    for cap in caps:
        runs: dict[str, dict] = {}
        for name, pol_name, mode in _runs(with_scout):
            pol = make_policy(pol_name, settings)
            lane = {"mode": mode, "links": links, "ageing_s": ageing_s}
            try:
                bs = settings.block_size
                rec = run_policy(pol, requests, cap, settings.cost, None, settings.engines, 0, bs, lane)
            except (RuntimeError, ValueError) as exc:  # one run's failure is reported, never the grid's end
                runs[name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
                continue
            prompt = int(rec.prompt_tokens.sum())
            m = session_metrics(requests, rec)
            m.update(
                {
                    "ttft_mean_s": float(rec.ttft.mean()),
                    "ttft_p99_s": float(np.percentile(rec.ttft, 99)),
                    "turn_mean_s": float(rec.turn.mean()),
                    "hit_rate": int(rec.hit_tokens.sum()) / prompt if prompt else 0.0,
                    "span_s": float(np.max(rec.arrival + rec.turn) - requests[0].t) if len(requests) else 0.0,
                }
            )
            runs[name] = m
        vs = {}
        for name, m in runs.items():
            base = runs[_baseline(name)]
            if name == _baseline(name) or "error" in m or "error" in base:
                continue
            vs[name] = {
                k: _change(m.get(f"{k}_s"), base.get(f"{k}_s"))
                for k in ("session_completion_mean", "first_call_ttft_p99", "first_call_ttft_mean", "ttft_mean")
            }
        out.append(
            {"closed_loop": True, "ageing_s": ageing_s, "capacity_blocks": int(cap), "runs": runs, "vs_fcfs": vs}
        )
    return out


def slack_check(cell: dict) -> dict | None:
    """The slack lane's acceptance in one cell (None when the cell has no `scout-proxy-lane`)."""
    pols = cell["policies"]
    lane, base, lru = pols.get("scout-proxy-lane"), pols.get("scout-proxy"), pols["lru"]
    if lane is None:
        return None

    def worse(p: dict) -> dict:
        thr = p.get("throughput_replanned_x_lru")
        return {
            "ttft_mean": p["ttft_mean_s"] / lru["ttft_mean_s"] - 1 if lru["ttft_mean_s"] > 0 else None,
            "turn_mean": p["turn_mean_s"] / lru["turn_mean_s"] - 1 if lru["turn_mean_s"] > 0 else None,
            "throughput_replanned": None if thr is None else 1 - thr,
        }

    w_lane = worse(lane)
    cap = cell["captured"]
    key = "of_oracle_ttft_mean" if "oracle-keeper" in pols else "of_belady_ttft_mean"
    return {
        "lane_worse_than_lru": w_lane,
        "no_lane_worse_than_lru": worse(base) if base is not None else None,
        "lane_ok": all(v is None or v <= WORSE for v in w_lane.values()),
        "captured_lane": cap["scout-proxy-lane"][key],
        "captured_no_lane": cap["scout-proxy"][key] if "scout-proxy" in cap else None,
        "captured_of": key,
    }


def _x(v: float | None) -> str:
    return "–" if v is None else f"{1 + v:.3f}"


def _d(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:+.1f}%"


def _p(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.0f}%"


def summary(results: dict) -> dict:
    """Counts a script (and report.md) can check: the slack lane's acceptance over the cells and the
    session lane's target over the cells at busy 70–90%."""
    out: dict = {}
    slack = [(c["params"], c["slack_lane"]) for c in results["grid"] if c.get("slack_lane")]
    if slack:
        bad = [p for p, s in slack if not s["lane_ok"]]
        hot = [(p, s) for p, s in slack if session_level(p["busy"])]

        def cmp(rows: list) -> dict:
            both = [(s["captured_lane"], s["captured_no_lane"]) for _, s in rows]
            both = [(a, b) for a, b in both if a is not None and b is not None]
            return {
                "cells_with_gain": len(both),
                "lane_more": sum(a > b + 1e-9 for a, b in both),
                "lane_less": sum(a < b - 1e-9 for a, b in both),
                "median_lane": float(np.median([a for a, _ in both])) if both else None,
                "median_no_lane": float(np.median([b for _, b in both])) if both else None,
            }

        out["slack"] = {
            "cells": len(slack),
            "cells_lane_worse_than_lru": len(bad),
            "cells_no_lane_worse_than_lru": sum(
                1
                for _, s in slack
                if s["no_lane_worse_than_lru"]
                and any(v is not None and v > WORSE for v in s["no_lane_worse_than_lru"].values())
            ),
            "captured_all": cmp(slack),
            "captured_busy_70_90": cmp(hot),
        }
    sess = [lane for c in results["grid"] if c.get("session_lane") for lane in [c["session_lane"]]]
    if sess:
        names = sorted({n for s in sess for n in s["vs_fcfs"]})
        per = {}
        for n in names:
            vals = [s["vs_fcfs"][n] for s in sess if n in s["vs_fcfs"]]
            comp = [v["session_completion_mean"] for v in vals if v["session_completion_mean"] is not None]
            fc = [v["first_call_ttft_p99"] for v in vals if v["first_call_ttft_p99"] is not None]
            per[n] = {
                "cells": len(vals),
                "session_completion_median": float(np.median(comp)) if comp else None,
                "session_completion_min": min(comp) if comp else None,
                "first_call_p99_median": float(np.median(fc)) if fc else None,
                "first_call_p99_max": max(fc) if fc else None,
                "cells_meeting_target": sum(
                    1
                    for v in vals
                    if (v["session_completion_mean"] or 0) <= -0.20 and (v["first_call_ttft_p99"] or 0) <= 0.25
                ),
            }
        out["session"] = per
        out["session_errors"] = [f"{n}: {r['error']}" for s in sess for n, r in s["runs"].items() if "error" in r]
    return out


def markdown(results: dict) -> list[str]:
    """The report's lanes section (empty without lanes)."""
    if not results.get("lanes"):
        return []
    md = ["## Lanes (issue 24)", ""]
    summ = results.get("lanes_summary") or summary(results)
    cells = results["grid"]
    if "slack" in summ:
        s = summ["slack"]
        a, h = s["captured_all"], s["captured_busy_70_90"]
        md += [
            "### Slack lane: scout-proxy with / without (× LRU; captured = share of the oracle keeper's "
            "mean-TTFT gain)",
            "",
            f"Cells where scout-proxy-lane is > 1% worse than LRU in mean TTFT, per-turn or re-planned "
            f"throughput: {s['cells_lane_worse_than_lru']} of {s['cells']} (scout-proxy without the lane: "
            f"{s['cells_no_lane_worse_than_lru']}). Captured, cells with a gain: lane more in {a['lane_more']}, "
            f"less in {a['lane_less']} of {a['cells_with_gain']} (median {_p(a['median_lane'])} vs "
            f"{_p(a['median_no_lane'])}); at busy 70–90%: more in {h['lane_more']}, less in {h['lane_less']} of "
            f"{h['cells_with_gain']}.",
            "",
            "| preset | pauses | cache× | busy | TTFT × LRU no lane / lane | turn × LRU | thpt × LRU | "
            "captured no lane / lane | lane ≤ 1% worse |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for c in cells:
            sl = c.get("slack_lane")
            if not sl:
                continue
            p, w0, w1 = c["params"], sl["no_lane_worse_than_lru"] or {}, sl["lane_worse_than_lru"]
            md.append(
                f"| {p['preset']} | {p['pauses']} | {p['cache_x_running_set']:g} | {p['busy']:g} | "
                f"{_x(w0.get('ttft_mean'))} / {_x(w1['ttft_mean'])} | {_x(w0.get('turn_mean'))} / "
                f"{_x(w1['turn_mean'])} | {_x(_neg(w0.get('throughput_replanned')))} / "
                f"{_x(_neg(w1['throughput_replanned']))} | {_p(sl['captured_no_lane'])} / "
                f"{_p(sl['captured_lane'])} | {'yes' if sl['lane_ok'] else '**no**'} |"
            )
        md.append("")
    if "session" in summ:
        names = list(summ["session"])
        md += [
            "### Session lane (closed-loop session timing; change vs the same family's FCFS run)",
            "",
            "Target: session completion −20% or better, first-call p99 TTFT no worse than +25%. "
            + "; ".join(
                f"`{n}`: target met in {v['cells_meeting_target']} of {v['cells']} cells, session completion "
                f"median {_d(v['session_completion_median'])} (best {_d(v['session_completion_min'])}), "
                f"first-call p99 median {_d(v['first_call_p99_median'])} (worst {_d(v['first_call_p99_max'])})"
                for n, v in summ["session"].items()
            ),
            "",
            "| preset | pauses | cache× | busy | FCFS session s (lru / scout) | "
            + " | ".join(f"{n} completion / first-call p99" for n in names)
            + " |",
            "|" + " --- |" * (5 + len(names)),
        ]
        for c in cells:
            sl = c.get("session_lane")
            if not sl:
                continue
            p, runs = c["params"], sl["runs"]
            fc = " / ".join(
                f"{runs[n].get('session_completion_mean_s', float('nan')):.1f}"
                for n in ("lru/fcfs", "scout-proxy/fcfs")
                if n in runs
            )
            row = [p["preset"], p["pauses"], f"{p['cache_x_running_set']:g}", f"{p['busy']:g}", fc]
            for n in names:
                v = sl["vs_fcfs"].get(n)
                row.append("–" if v is None else f"{_d(v['session_completion_mean'])} / {_d(v['first_call_ttft_p99'])}")
            md.append("| " + " | ".join(row) + " |")
        md.append("")
    return md


def _neg(v: float | None) -> float | None:
    return None if v is None else -v
