"""The demo's figures: engine counters before/after a phase, the per-phase summary, and the table.

Why apart from `cli.py`: the run orchestrates processes; this turns what they measured into the
numbers the README quotes (the workload's own hit rate from usage, the engine's counters including
warmups, TTFT percentiles), and `format_table` is tested on its own.
"""

from __future__ import annotations

import statistics
from typing import Any

import httpx

from proxy.demo.workload import WorkloadResult


def engine_counters(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    out = {"queries": 0.0, "hits": 0.0, "loaded": 0.0}
    for line in text.splitlines():
        if line.startswith("vllm:external_prefix_cache_hits_total"):
            out["loaded"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prefix_cache_queries_total"):
            out["queries"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prefix_cache_hits_total"):
            out["hits"] += float(line.rsplit(" ", 1)[1])
    return out


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    vs = sorted(values)
    return vs[min(len(vs) - 1, max(0, round(q * (len(vs) - 1))))]


def summarise(res: WorkloadResult, before: dict, after: dict, warm: dict | None) -> dict[str, Any]:
    prompt = sum(r.prompt_tokens for r in res.records)
    cached = sum(r.cached_tokens for r in res.records)
    ttfts = [r.ttft_s for r in res.records if r.ttft_s is not None]
    dq = after["queries"] - before["queries"]
    out = {
        "requests": len(res.records),
        "errors": res.errors,
        "tool_resumes": sum(r.resumed for r in res.records),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "workload_hit_rate": cached / prompt if prompt else 0.0,
        "engine_hit_rate": (after["hits"] - before["hits"]) / dq if dq else 0.0,
        "engine_prompt_tokens": dq,
        "engine_loaded_tokens": after.get("loaded", 0.0) - before.get("loaded", 0.0),
        "ttft_mean_s": statistics.fmean(ttfts) if ttfts else float("nan"),
        "ttft_p50_s": _pct(ttfts, 0.5),
        "ttft_p99_s": _pct(ttfts, 0.99),
        "turn_mean_s": statistics.fmean(res.turn_latencies) if res.turn_latencies else float("nan"),
        "wall_s": res.wall_s,
        "warm_requests": 0,
        "warm_prompt_tokens": 0,
        "warm_computed_tokens": 0,
    }
    if warm is not None:
        out.update(warm)
    return out


def format_table(d: dict, p: dict) -> str:
    def pct(x: float) -> str:
        return f"{100 * x:5.1f}%"

    def ms(x: float) -> str:
        return f"{1000 * x:7.1f} ms"

    def change(a: float, b: float) -> str:
        return f"{100 * (b - a) / a:+.1f}%" if a else "-"

    rows = [
        (
            "workload prefix hit rate (usage)",
            pct(d["workload_hit_rate"]),
            pct(p["workload_hit_rate"]),
            f"{100 * (p['workload_hit_rate'] - d['workload_hit_rate']):+.1f} pp",
        ),
        (
            "engine prefix hit rate (counters, incl. warmups)",
            pct(d["engine_hit_rate"]),
            pct(p["engine_hit_rate"]),
            f"{100 * (p['engine_hit_rate'] - d['engine_hit_rate']):+.1f} pp",
        ),
        ("mean TTFT", ms(d["ttft_mean_s"]), ms(p["ttft_mean_s"]), change(d["ttft_mean_s"], p["ttft_mean_s"])),
        ("p50 TTFT", ms(d["ttft_p50_s"]), ms(p["ttft_p50_s"]), change(d["ttft_p50_s"], p["ttft_p50_s"])),
        ("p99 TTFT", ms(d["ttft_p99_s"]), ms(p["ttft_p99_s"]), change(d["ttft_p99_s"], p["ttft_p99_s"])),
        (
            "mean per-turn latency",
            ms(d["turn_mean_s"]),
            ms(p["turn_mean_s"]),
            change(d["turn_mean_s"], p["turn_mean_s"]),
        ),
        *(
            [
                (
                    "host-tier tokens loaded (engine)",
                    f"{d.get('engine_loaded_tokens', 0):,.0f}",
                    f"{p.get('engine_loaded_tokens', 0):,.0f}",
                    "",
                )
            ]
            if d.get("engine_loaded_tokens") or p.get("engine_loaded_tokens")
            else []
        ),
        (
            "client requests (tool resumes)",
            f"{d['requests']} ({d['tool_resumes']})",
            f"{p['requests']} ({p['tool_resumes']})",
            "",
        ),
        ("client prompt tokens", f"{d['prompt_tokens']:,}", f"{p['prompt_tokens']:,}", ""),
        ("warmup/touch requests", "0", f"{p['warm_requests']:,}", ""),
        (
            "warmup prompt tokens sent",
            "0",
            f"{p['warm_prompt_tokens']:,}",
            f"{100 * p['warm_prompt_tokens'] / max(1, p['prompt_tokens']):.1f}% of client",
        ),
        (
            "warmup tokens prefilled (cost)",
            "0",
            f"{p['warm_computed_tokens']:,}",
            f"{100 * p['warm_computed_tokens'] / max(1, p['prompt_tokens']):.1f}% of client",
        ),
        ("errors", str(d["errors"]), str(p["errors"]), ""),
        ("wall time", f"{d['wall_s']:.1f} s", f"{p['wall_s']:.1f} s", ""),
    ]
    w0 = max(len(r[0]) for r in rows)
    lines = [f"{'':<{w0}}  {'direct':>14}  {'via proxy':>14}  change", "-" * (w0 + 46)]
    lines += [f"{a:<{w0}}  {b:>14}  {c:>14}  {e}" for a, b, c, e in rows]
    return "\n".join(lines)
