"""Replay report: `report.json` (everything), `report.md` (tables + closing note), PNG plots.

Why both: JSON for machines and regression checks, Markdown for a reviewer deciding "does agent
foreknowledge pay on my traffic?". Plots use matplotlib's Agg backend (no display) and are skipped,
with a note in the report, when matplotlib is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

PLOTS = ("hit_rate_vs_capacity.png", "lead_time_cdf.png", "ttft_cdf.png")


def _public(results: dict) -> dict:
    """The replay results without the raw samples (kept out of JSON)."""
    out = dict(results)
    caps = []
    for row in results["capacities"]:
        pols = {n: {k: v for k, v in s.items() if not k.startswith("_")} for n, s in row["policies"].items()}
        caps.append({**row, "policies": pols})
    out["capacities"] = caps
    return out


def _f(x, nd: int = 4) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def closing_note(results: dict) -> list[str]:
    """Every policy's hit rate and the share of the LRU→Belady gap it closes, per capacity (with a
    host tier: mean TTFT, tool-resume TTFT and the share of the TTFT gap)."""
    lines = []
    for row in results["capacities"]:
        parts = []
        if row.get("cpu_capacity_blocks"):
            for name, s in row["policies"].items():
                gap = s.get("ttft_gap_closed")
                g = "" if name in ("lru", "belady") or gap is None else f", {_pct(gap)} of the TTFT gap"
                res = s.get("ttft_resume_mean_s")
                r = "" if res is None else f", tool resumes {res:.4f} s"
                net = s.get("net_saved_vs_lru_s")
                n = "" if net is None else f", net saved {net:.2f} s"
                parts.append(f"{name} TTFT {s['ttft_mean_s']:.4f} s{r}{g}{n}")
            lines.append(
                f"- capacity {row['capacity_blocks']} blocks + host tier {row['cpu_capacity_blocks']} "
                "blocks: " + "; ".join(parts) + "."
            )
            continue
        for name, s in row["policies"].items():
            gap = s.get("gap_closed")
            g = "" if name in ("lru", "belady") or gap is None else f", {_pct(gap)} of the gap"
            parts.append(f"{name} {s['hit_rate']:.4f}{g}")
        lines.append(f"- capacity {row['capacity_blocks']} blocks: " + "; ".join(parts) + ".")
        bel = row["policies"].get("belady")
        over = [n for n, s in row["policies"].items() if bel is not None and s["hit_rate"] > bel["hit_rate"]]
        if over:  # only policies that warm can: a warm is a prefetch, which demand-paging Belady does not do
            lines.append(
                f"  Above pinned Belady's hit rate (it bounds eviction orders, not prefetching): {', '.join(over)}."
            )
    return lines


def markdown(results: dict, meta: dict) -> str:
    md = [f"# CacheScout replay: {meta.get('title', 'report')}", ""]
    src = meta.get("source", {})
    md.append("## Input")
    for k, v in src.items():
        md.append(f"- {k}: {v}")
    md.append(
        f"- requests: {results['requests']}, span {results['span_s']:.1f} s, unique blocks {results['unique_blocks']}"
    )
    st = meta.get("settings", {})
    md.append("- settings: " + ", ".join(f"{k}={v}" for k, v in st.items()))
    md.append("")
    for row in results["capacities"]:
        tier = row.get("cpu_capacity_blocks") or 0
        md.append(f"## Capacity {row['capacity_blocks']} blocks" + (f" + host tier {tier} blocks" if tier else ""))
        md.append("")
        if tier:
            md.append(
                "| policy | GPU hit tokens | host load tokens | recompute tokens | load s | TTFT mean s "
                "| TTFT gap closed | tool-resume TTFT mean s | resume gap closed | net saved vs LRU s |"
            )
            md.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
            for name, s in row["policies"].items():
                md.append(
                    f"| {name} | {s['gpu_hit_tokens']} | {s['host_load_tokens']} | {s['recompute_tokens']} "
                    f"| {s['load_s']:.3f} | {s['ttft_mean_s']:.4f} | {_pct(s.get('ttft_gap_closed'))} "
                    f"| {_f(s.get('ttft_resume_mean_s'))} | {_pct(s.get('ttft_resume_gap_closed'))} "
                    f"| {_f(s.get('net_saved_vs_lru_s'), 3)} |"
                )
            md.append("")
        md.append(
            "| policy | hit rate (tokens) | hit rate (blocks) | gap closed | prefill tokens | warmup tokens "
            "| TTFT mean s | p50 s | p99 s | turn mean s | req/s @ budget | actions/req |"
        )
        md.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for name, s in row["policies"].items():
            md.append(
                f"| {name} | {s['hit_rate']:.4f} | {s['block_hit_rate']:.4f} | {_pct(s.get('gap_closed'))} "
                f"| {s['prefill_tokens']} | {s['warmup_tokens']} | {s['ttft_mean_s']:.4f} "
                f"| {s['ttft_p50_s']:.4f} | {s['ttft_p99_s']:.4f} | {s['turn_mean_s']:.4f} "
                f"| {s['throughput_at_budget_rps']:.2f} | {s['actions_per_request']:.3f} |"
            )
        md.append("")
        from proxy.replay.scout_hints import hint_report_lines  # tool-resume TTFT, hint calibration (issue 16)

        md.extend(hint_report_lines(row))
        for name, s in row["policies"].items():
            why = (s.get("extra") or {}).get("top_skips")
            if why:
                md.append(
                    f"_{name}: why candidates were not acted on (top skip reasons)_: "
                    + ", ".join(f"{k} {v}" for k, v in why.items())
                )
                md.append("")
            if not s.get("signals"):
                continue
            md.append(
                f"**{name}: per-signal conversion, lead time, yield** "
                f"(pollution vs LRU {s['pollution_s']:.3f} s; net prefill saved vs LRU after warmups "
                f"{_f(s.get('net_saved_vs_lru_s'), 3)} s)"
            )
            md.append("")
            md.append(
                "| signal | actions | acted tokens | warm tokens | conversion | lead p10/p50/p90 s "
                "| early share | saved s | cost s | pollution s | yield s |"
            )
            md.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
            for reason, g in s["signals"].items():
                leads = "/".join(_f(g[k], 3) for k in ("lead_p10_s", "lead_p50_s", "lead_p90_s"))
                md.append(
                    f"| {reason} | {g['actions']} | {g['acted_tokens']} | {g['warm_tokens']} "
                    f"| {_pct(g['conversion'])} | {leads} | {_pct(g['early_share'])} | {g['saved_s']:.3f} "
                    f"| {g['cost_s']:.3f} | {g['pollution_s']:.3f} | {g['yield_s']:.3f} |"
                )
            md.append("")
            if s.get("extra"):
                md.append(f"_{name} details_: `{json.dumps(s['extra'], sort_keys=True)}`")
                md.append("")
    md.append("## Closing note")
    md.append("")
    md.extend(closing_note(results))
    md.append("")
    md.append(
        "Definitions: hit rate = prefix-hit tokens / prompt tokens (blocks: hit blocks / block accesses); "
        "gap closed = (policy − lru) / (belady − lru); conversion = acted tokens that served a real hit "
        "before eviction / acted tokens; early share = converted tokens whose lead time ≥ the prefill time "
        "of the chain the action kept or warmed; "
        "yield = saved − action cost − pollution (lost hits vs LRU, shared by acted tokens). "
        "TTFT and turn latency: the simulated engine's (SimEngine, continuous batching, in virtual time); "
        "req/s @ budget: largest rate (arrival times compressed, each request's measured prefill work "
        "re-queued on a FIFO) keeping p99 TTFT within the budget."
    )
    if meta.get("plots_note"):
        md.append("")
        md.append(meta["plots_note"])
    return "\n".join(md) + "\n"


def plots(results: dict, out: Path, ttft_capacity_index: int = 0) -> list[str]:
    """Write the PNGs; returns their names (raises ImportError without matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    caps = [row["capacity_blocks"] for row in results["capacities"]]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in results["policies"]:
        ys = [row["policies"][name]["hit_rate"] for row in results["capacities"]]
        ax.plot(caps, ys, marker="o", label=name)
    ax.set_xlabel("capacity (blocks)")
    ax.set_ylabel("prefix hit rate (tokens)")
    ax.set_title("Hit rate vs capacity")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / PLOTS[0], dpi=110)
    plt.close(fig)
    written.append(PLOTS[0])

    row = results["capacities"][min(ttft_capacity_index, len(results["capacities"]) - 1)]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    any_lead = False
    for name, s in row["policies"].items():
        for reason, leads in sorted(s.get("_leads", {}).items()):
            x = np.sort(np.asarray(leads))
            ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=f"{name}: {reason}")
            any_lead = True
    ax.set_xlabel("lead time: action → the request it served (s)")
    ax.set_ylabel("CDF")
    ax.set_title(f"Lead time per signal (capacity {row['capacity_blocks']})")
    if any_lead:
        ax.set_xscale("symlog", linthresh=0.01)
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no converted actions", ha="center", transform=ax.transAxes)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / PLOTS[1], dpi=110)
    plt.close(fig)
    written.append(PLOTS[1])

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, s in row["policies"].items():
        x = np.sort(np.asarray(s.get("_ttft", [])))
        if len(x):
            ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=name)
    ax.set_xlabel("TTFT (s, cost model)")
    ax.set_ylabel("CDF")
    ax.set_xscale("symlog", linthresh=0.01)
    ax.set_title(f"TTFT distribution (capacity {row['capacity_blocks']})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / PLOTS[2], dpi=110)
    plt.close(fig)
    written.append(PLOTS[2])
    return written


def write_report(results: dict, meta: dict, out_dir: str | Path, with_plots: bool = True) -> dict:
    """Write report.json, report.md and (optionally) the plots into `out_dir`. Returns paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    if with_plots:
        try:
            written = plots(results, out)
        except ImportError as exc:
            meta = {**meta, "plots_note": f"Plots skipped: matplotlib unavailable ({exc}); install cachescout[plots]."}
    doc = {"meta": meta, "results": _public(results), "closing_note": closing_note(results), "plots": written}
    (out / "report.json").write_text(json.dumps(doc, indent=2, sort_keys=False, default=float))
    (out / "report.md").write_text(markdown(results, meta))
    return {"json": str(out / "report.json"), "md": str(out / "report.md"), "plots": [str(out / p) for p in written]}
