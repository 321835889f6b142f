"""The grid's report: `report.md` (one table per preset) and `headroom_map.png` (the map).

The map has one row of heatmaps per preset; in each, a row per (pause profile, cache × running set)
and a column per busy share. Panels: the headroom LRU → belady in mean TTFT, the same to the
oracle keeper (when the runner has it), and the share of the bound's gain that scout-proxy and
history capture (of the oracle keeper's gain when available, else of belady's).
"""

from __future__ import annotations

from pathlib import Path


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def _ms(x) -> str:
    return "–" if x is None else f"{1000 * x:.0f}"


def _share_key(results: dict) -> tuple[str, str]:
    if "oracle-keeper" in results["policies"]:
        return "of_oracle_ttft_mean", "oracle keeper"
    return "of_belady_ttft_mean", "belady"


def markdown(results: dict, meta: dict, plots: list[str], note: str | None = None) -> str:
    key, bound = _share_key(results)
    pols = results["policies"]
    md = [f"# CacheScout replay: {meta['title']}", ""]
    md.append(
        f"Command: `{meta['command']}`. {len(results['grid'])} cells, wall time {results['wall_s']} s "
        f"({results['jobs']} worker processes). Policies: {', '.join(pols)}."
    )
    if results["unavailable_policies"]:
        md.append(f"Unavailable in this runner (not run): {', '.join(results['unavailable_policies'])}.")
    md.append("")
    md.append(
        "Headroom = 1 − bound's mean TTFT / LRU's (LRU → belady; → the oracle keeper where run); "
        f"captured = the share of the {bound}'s mean-TTFT gain over LRU a policy realises (– where that gain "
        "is under 1% of LRU's TTFT). Capacity = cache × the running set's p90 at busy "
        f"{results['axes']['ref_busy']}. Throughput: re-planned at the p99 TTFT budget (req/s, policy re-run "
        "at each session-arrival rate, pauses unchanged; `>` = still inside the budget at the ladder's top, "
        "`<` = outside at its bottom)."
    )
    md.append("")
    for p in plots:
        md.append(f"![headroom map]({Path(p).name})")
        md.append("")
    for preset in results["axes"]["presets"]:
        cells = [c for c in results["grid"] if c["params"]["preset"] == preset]
        if not cells:
            continue
        m0 = cells[0]["params"]
        md.append(f"## {preset} ({m0['sessions']} sessions, budget {m0['latency_budget_s']} s)")
        md.append("")
        hdr = [
            "pauses",
            "cache×",
            "busy",
            "blocks",
            "live/idle",
            "LRU TTFT ms",
            "belady ms",
            "headroom",
            "resume headroom",
        ]
        if "oracle-keeper" in pols:
            hdr.append("oracle headroom")
        hdr += [f"{n} captured" for n in pols if n not in ("lru", "belady", "oracle-keeper")]
        if "oracle-keeper" in pols:
            hdr.append("oracle captured of belady")
        hdr.append("thpt LRU → " + "/".join(n for n in pols if n != "lru"))
        md.append("| " + " | ".join(hdr) + " |")
        md.append("|" + " --- |" * len(hdr))
        for c in cells:
            p, h, m = c["params"], c["headroom"], c["params"]["measured"]
            lru, bel = c["policies"]["lru"], c["policies"]["belady"]
            row = [
                p["pauses"],
                f"{p['cache_x_running_set']:g}",
                f"{p['busy']:g}",
                str(p["capacity_blocks"]),
                f"{m['sessions_live_mean']:.1f}/{m['sessions_idle_mean']:.1f}",
                _ms(lru["ttft_mean_s"]),
                _ms(bel["ttft_mean_s"]),
                _pct(h["ttft_mean"]),
                _pct(h["ttft_resume_mean"]),
            ]
            if "oracle-keeper" in pols:
                row.append(_pct(h["oracle_ttft_mean"]))
            row += [_pct(c["captured"][n][key]) for n in pols if n not in ("lru", "belady", "oracle-keeper")]
            if "oracle-keeper" in pols:
                row.append(_pct(c["captured"]["oracle-keeper"]["of_belady_ttft_mean"]))

            def thr(s: dict) -> str:
                mark = {"above": ">", "below": "<"}.get(s["throughput_replanned_censored"] or "", "")
                return f"{mark}{s['throughput_replanned_rps']:.2f}"

            row.append(thr(lru) + " → " + "/".join(thr(c["policies"][n]) for n in pols if n != "lru"))
            md.append("| " + " | ".join(row) + " |")
        md.append("")
    if results.get("lanes"):
        from proxy.replay.grid_lanes import markdown as lanes_markdown

        md += lanes_markdown(results)
    big = [c["params"] for c in results["grid"] if (c["headroom"]["ttft_mean"] or 0) >= 0.10]
    md.append(f"Cells with LRU → belady headroom ≥ 10% mean TTFT: {len(big)} of {len(results['grid'])}.")
    if note:
        md += ["", note]
    return "\n".join(md) + "\n"


def picture(results: dict, path: Path) -> str:
    """Write the headroom map; returns its path (ImportError without matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    ax_ = results["axes"]
    presets, busy = ax_["presets"], ax_["busy"]
    rows = [(p, x) for p in ax_["pauses"] for x in ax_["cache_x_running_set"]]
    key, bound = _share_key(results)
    panels = [("headroom", "ttft_mean", "headroom LRU→belady\n(mean TTFT)")]
    if "oracle-keeper" in results["policies"]:
        panels.append(("headroom", "oracle_ttft_mean", "headroom LRU→oracle keeper\n(mean TTFT)"))
    panels.append(("captured:scout-proxy", key, f"scout-proxy: share of\n{bound}'s gain"))
    panels.append(("captured:history", key, f"history: share of\n{bound}'s gain"))
    fig, axes = plt.subplots(
        len(presets), len(panels), figsize=(3.3 * len(panels), 0.42 * len(rows) * len(presets) + 1.5), squeeze=False
    )
    index = {
        (c["params"]["preset"], c["params"]["pauses"], c["params"]["cache_x_running_set"], c["params"]["busy"]): c
        for c in results["grid"]
    }
    for i, preset in enumerate(presets):
        for j, (where, k, title) in enumerate(panels):
            grid = np.full((len(rows), len(busy)), np.nan)
            for r, (pause, x) in enumerate(rows):
                for b, load in enumerate(busy):
                    c = index.get((preset, pause, x, load))
                    if c is None:
                        continue
                    if where == "headroom":
                        v = c["headroom"][k]
                    else:
                        name = where.split(":", 1)[1]
                        v = c["captured"].get(name, {}).get(k)
                    if v is not None:
                        grid[r, b] = v
            ax = axes[i][j]
            vmin, vmax = (0.0, 1.0) if where == "headroom" else (-0.5, 1.0)
            ax.imshow(grid, cmap="viridis" if where == "headroom" else "RdYlGn", vmin=vmin, vmax=vmax, aspect="auto")
            for r in range(len(rows)):
                for b in range(len(busy)):
                    v = grid[r, b]
                    ax.text(b, r, "–" if np.isnan(v) else f"{100 * v:.0f}", ha="center", va="center", fontsize=7)
            ax.set_xticks(range(len(busy)), [f"{x:g}" for x in busy], fontsize=7)
            ax.set_yticks(range(len(rows)), [f"{p} ×{x:g}" for p, x in rows], fontsize=7)
            if i == 0:
                ax.set_title(title, fontsize=8)
            if j == 0:
                ax.set_ylabel(preset, fontsize=9)
            if i == len(presets) - 1:
                ax.set_xlabel("busy share", fontsize=7)
    fig.suptitle("Headroom map (%, per cell: pauses × cache/running set, by busy share)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)
