"""The demo's picture: per scene, the TTFT distribution direct vs through the proxy (all seeds pooled),
all requests and tool resumes apart.

Why a picture: a mean hides where the time went; the CDF shows which requests the proxy moved (tool
resumes from a full prefill to a cache hit) and that the rest did not get worse. Needs matplotlib
(the `plots` extra); without it `write_picture` returns None and the demo says so.
"""

from __future__ import annotations

import os
from typing import Any


def write_picture(results: dict[str, list[dict[str, Any]]], out_dir: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    os.makedirs(out_dir, exist_ok=True)
    names = list(results)
    fig, axes = plt.subplots(1, len(names), figsize=(6.2 * len(names), 4.2), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        for side, color in (("direct", "tab:gray"), ("proxy", "tab:blue")):
            every: list[float] = []
            resumes: list[float] = []
            for pair in results[name]:
                tt, rs = pair[side].get("_ttfts", []), pair[side].get("_resume", [])
                every += tt
                resumes += [t for t, r in zip(tt, rs, strict=False) if r]
            label = "direct" if side == "direct" else "via proxy"
            for vals, style, what in ((every, "-", "all requests"), (resumes, "--", "tool resumes")):
                if not vals:
                    continue
                xs = sorted(1000 * v for v in vals)
                ys = [(i + 1) / len(xs) for i in range(len(xs))]
                ax.step(xs, ys, style, color=color, where="post", label=f"{label}, {what} (n={len(xs)})")
        ax.set_xscale("log")
        ax.set_xlabel("time to first token (ms, log)")
        ax.set_ylabel("share of requests")
        ax.set_title(name.replace("_", " "))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("cachescout demo: TTFT distributions, direct vs through the proxy (all seeds)")
    fig.tight_layout()
    path = os.path.join(out_dir, "demo-ttft.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
