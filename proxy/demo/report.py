"""The demo's figures: engine counters before/after a run, a run's summary, the medians over seeds,
each scene's table with its one-line why, and the JSON.

Why apart from `cli.py`: the loop orchestrates processes; this turns what they measured into the
numbers the README quotes (the workload's own hit rate from usage, the engine's counters including
warmups, TTFT percentiles, tool-resume TTFT, session times), and the tables are tested on their own.
"""

from __future__ import annotations

import statistics
from typing import Any

import httpx

from proxy.harness.workload import WorkloadResult


def engine_counters(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    out = {"queries": 0.0, "hits": 0.0, "loaded": 0.0, "ttft_sum": 0.0, "ttft_count": 0.0}
    for line in text.splitlines():
        if line.startswith("vllm:time_to_first_token_seconds_sum"):
            out["ttft_sum"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:time_to_first_token_seconds_count"):
            out["ttft_count"] += float(line.rsplit(" ", 1)[1])
        if line.startswith("vllm:external_prefix_cache_hits_total"):
            out["loaded"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prefix_cache_queries_total"):
            out["queries"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prefix_cache_hits_total"):
            out["hits"] += float(line.rsplit(" ", 1)[1])
    return out


def engine_client_ttft(url: str) -> dict[str, float]:
    """The mean TTFT of the client's requests on the engine's own virtual clock (first token minus
    arrival, from its request log; the proxy's warm/touch requests left out).

    Why: the client-side TTFT adds the wall time every hop waits for a CPU; on a loaded machine that
    wait differs between the arms (the proxy arm has one more process) and from run to run, and it
    swamps the effect. The engine's clock counts its modelled work and queueing only."""
    try:
        rows = httpx.get(url + "/debug/requests", timeout=30).json()["requests"]
    except (httpx.HTTPError, ValueError, KeyError):
        return {}
    ttfts = [
        float(r["first_token_at"]) - float(r["arrival"])
        for r in rows
        if not r.get("warmup") and r.get("first_token_at") is not None and r.get("arrival") is not None
    ]
    return {"client_engine_ttft_mean_s": statistics.fmean(ttfts)} if ttfts else {}


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    vs = sorted(values)
    return vs[min(len(vs) - 1, max(0, round(q * (len(vs) - 1))))]


def summarise(res: WorkloadResult, before: dict, after: dict, warm: dict | None) -> dict[str, Any]:
    prompt = sum(r.prompt_tokens for r in res.records)
    cached = sum(r.cached_tokens for r in res.records)
    ttfts = [r.ttft_s for r in res.records if r.ttft_s is not None]
    resume = [r.ttft_s for r in res.records if r.ttft_s is not None and r.resumed]
    rp = sum(r.prompt_tokens for r in res.records if r.resumed)
    rc = sum(r.cached_tokens for r in res.records if r.resumed)
    first = [r.ttft_s for r in res.records if r.ttft_s is not None and not r.resumed]
    dq = after["queries"] - before["queries"]
    out = {
        "requests": len(res.records),
        "errors": res.errors,
        "tool_resumes": sum(r.resumed for r in res.records),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "workload_hit_rate": cached / prompt if prompt else 0.0,
        "resume_hit_rate": rc / rp if rp else 0.0,
        "resume_prompt_tokens": rp,
        "engine_hit_rate": (after["hits"] - before["hits"]) / dq if dq else 0.0,
        "engine_prompt_tokens": dq,
        "engine_loaded_tokens": after.get("loaded", 0.0) - before.get("loaded", 0.0),
        # the engine's own TTFT (arrival in the engine to first token; warmups included)
        "engine_ttft_mean_s": (after.get("ttft_sum", 0.0) - before.get("ttft_sum", 0.0))
        / max(1.0, after.get("ttft_count", 0.0) - before.get("ttft_count", 0.0)),
        "ttft_mean_s": statistics.fmean(ttfts) if ttfts else float("nan"),
        "engine_client_ttft_mean_s": after.get("client_engine_ttft_mean_s", float("nan")),
        "ttft_p50_s": _pct(ttfts, 0.5),
        "ttft_p99_s": _pct(ttfts, 0.99),
        "ttft_resume_mean_s": statistics.fmean(resume) if resume else float("nan"),
        "ttft_turn_start_mean_s": statistics.fmean(first) if first else float("nan"),
        "turn_mean_s": statistics.fmean(res.turn_latencies) if res.turn_latencies else float("nan"),
        "session_mean_s": statistics.fmean(res.session_latencies) if res.session_latencies else float("nan"),
        "wall_s": res.wall_s,
        "warm_requests": 0,
        "warm_prompt_tokens": 0,
        "warm_computed_tokens": 0,
    }
    if warm is not None:
        out.update(warm)
    out["_ttfts"] = ttfts  # the distribution, for the picture (not written to JSON)
    out["_resume"] = [bool(r.resumed) for r in res.records if r.ttft_s is not None]
    return out


# the latency rows of a scene's table: (key, label); scene 2's ±3% rule is about these
LATENCY_ROWS = (
    ("ttft_mean_s", "mean TTFT"),
    ("engine_client_ttft_mean_s", "mean TTFT, engine clock"),
    ("ttft_p50_s", "p50 TTFT"),
    ("ttft_p99_s", "p99 TTFT"),
    ("ttft_resume_mean_s", "tool-resume TTFT (mean)"),
    ("turn_mean_s", "per-turn latency (mean)"),
    ("session_mean_s", "session completion time (mean)"),
)
MEDIAN_KEYS = (
    *(k for k, _ in LATENCY_ROWS),
    "ttft_turn_start_mean_s",
    "workload_hit_rate",
    "resume_hit_rate",
    "engine_hit_rate",
    "requests",
    "tool_resumes",
    "prompt_tokens",
    "errors",
    "warm_requests",
    "warm_prompt_tokens",
    "warm_computed_tokens",
    "wall_s",
)


def public(summary: dict[str, Any]) -> dict[str, Any]:
    """A run's figures without the raw distributions (what the JSON keeps per seed)."""
    return {k: v for k, v in summary.items() if not k.startswith("_")}


def medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Per key, the median over the seeds' figures."""
    out: dict[str, float] = {}
    for key in MEDIAN_KEYS:
        vals = [float(r[key]) for r in runs if key in r and r[key] == r[key]]
        if vals:
            out[key] = statistics.median(vals)
    return out


def scenes_json(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """`scenes.<name>.direct` / `.proxy`: medians over the seeds; `.runs`: each seed's figures."""
    return {
        name: {
            "direct": medians([p["direct"] for p in pairs]),
            "proxy": medians([p["proxy"] for p in pairs]),
            "runs": [{"seed": p["seed"], "direct": public(p["direct"]), "proxy": public(p["proxy"])} for p in pairs],
        }
        for name, pairs in results.items()
    }


def changes(pairs: list[dict[str, Any]], key: str) -> list[float]:
    """Per seed, proxy vs direct as a relative change (hit rate: percentage points)."""
    out = []
    for pair in pairs:
        a, b = float(pair["direct"].get(key, float("nan"))), float(pair["proxy"].get(key, float("nan")))
        if a != a or b != b:
            continue
        out.append(b - a if key.endswith("hit_rate") else ((b - a) / a if a else 0.0))
    return out


def why(pairs: list[dict[str, Any]]) -> str:
    """One line: what the proxy did and why not more — summed over the seeds' planner skip reasons,
    actions emitted and the per-signal yields (/debug/state stats and self_evaluation.signals)."""
    skipped: dict[str, int] = {}
    emitted: dict[str, int] = {}
    saved = spent = 0.0
    for pair in pairs:
        p = pair["proxy"]
        for k, v in (p.get("actions_skipped") or {}).items():
            skipped[k] = skipped.get(k, 0) + int(v)
        for k, v in (p.get("actions_by_reason") or {}).items():
            emitted[k] = emitted.get(k, 0) + int(v)
        for y in (p.get("signals") or {}).values():
            saved += float(y.get("saved_tokens", 0.0))
            spent += float(y.get("spent_tokens", 0.0))
    n = max(1, len(pairs))
    did = ", ".join(f"{k} {v / n:.0f}" for k, v in sorted(emitted.items(), key=lambda kv: -kv[1])[:3]) or "none"
    top = sorted(skipped.items(), key=lambda kv: -kv[1])[:3]
    held = ", ".join(f"{k} {v / n:.0f}" for k, v in top) or "none"
    verdict = ""
    observing = bool(top) and top[0][0] in ("tick_overflow", "tick_engine_busy")
    if observing and not emitted:
        verdict = "the engine queues and the requests in flight overflow the cache, so the planner only observes; "
    elif observing:
        verdict = (
            "the engine queued or the requests in flight overflowed the cache much of the time, so it mostly observed; "
        )
    elif emitted and saved > spent:
        verdict = "tool pauses outlive the cache and the engine has slack, so warms pay (in tokens); "
    elif emitted:
        verdict = "its actions did not measurably pay; "
    return (
        f"why: {verdict}actions a run {did}; skipped {held}; "
        f"yield: saved {saved / n:,.0f} tokens for {spent / n:,.0f} spent a run"
    )


def format_scene(title: str, pairs: list[dict[str, Any]]) -> str:
    """A scene's table: medians over the seeds, the median change with its spread (min..max)."""
    d = medians([p["direct"] for p in pairs])
    x = medians([p["proxy"] for p in pairs])

    def ms(v: float | None) -> str:
        return "-" if v is None or v != v else (f"{v:8.2f} s " if v >= 10 else f"{1000 * v:7.1f} ms")

    def spread(key: str, unit: str) -> str:
        ch = changes(pairs, key)
        if not ch:
            return ""
        scale = 100.0
        mid = statistics.median(ch)
        if len(ch) == 1:
            return f"{scale * mid:+6.1f}{unit}"
        return f"{scale * mid:+6.1f}{unit}  [{scale * min(ch):+.1f} .. {scale * max(ch):+.1f}]"

    rows = [(label, ms(d.get(k)), ms(x.get(k)), spread(k, "%")) for k, label in LATENCY_ROWS]
    rows.append(
        (
            "workload prefix hit rate",
            f"{100 * d.get('workload_hit_rate', 0):6.1f}%",
            f"{100 * x.get('workload_hit_rate', 0):6.1f}%",
            spread("workload_hit_rate", " pp"),
        )
    )
    client = max(1.0, x.get("prompt_tokens", 0.0))
    rows += [
        (
            "client requests (tool resumes)",
            f"{d.get('requests', 0):.0f} ({d.get('tool_resumes', 0):.0f})",
            f"{x.get('requests', 0):.0f} ({x.get('tool_resumes', 0):.0f})",
            "",
        ),
        ("warmup/touch requests sent", "0", f"{x.get('warm_requests', 0):,.0f}", ""),
        (
            "their cost: tokens prefilled",
            "0",
            f"{x.get('warm_computed_tokens', 0):,.0f}",
            f"{100 * x.get('warm_computed_tokens', 0) / client:.1f}% of client prompt tokens",
        ),
        ("errors", f"{d.get('errors', 0):.0f}", f"{x.get('errors', 0):.0f}", ""),
    ]
    w0 = max(len(r[0]) for r in rows)
    head = f"{'':<{w0}}  {'direct':>11}  {'via proxy':>11}  change  [spread over seeds]"
    lines = [title, head, "-" * (len(head) + 4)]
    lines += [f"{a:<{w0}}  {b:>11}  {c:>11}  {e}" for a, b, c, e in rows]
    lines.append(why(pairs))
    return "\n".join(lines)
