"""Replay on a fleet: N engine replicas, each with its own cache and its own CacheScout sidecar.

Why: the single-replica replay (`engines` = parallel prefill servers sharing *one* cache) cannot
answer "what does CacheScout buy on my 8-replica fleet". Behind a router every replica has its own
prefix cache, and its sidecar learns only from the 1/N of the traffic the router sends it. This
module routes the request stream once, by a routing rule, into N sub-streams, replays every policy
on each sub-stream with its own cache of `capacity` blocks (a fresh policy per replica: a sidecar's
state is its own), and merges the figures over the fleet.

Routing rules (what a router does, not what the warmups do: sidecar warmups never move traffic):
- `round_robin`: request i goes to replica i mod N (vllm-router `--policy round_robin`).
- `session`: a stable hash of the session id (vllm-router `--policy consistent_hash` keyed on
  `X-Session-ID` or the body's `user`); requests without a session id hash their tenant.
- `prefix`: the router's own prefix index (vllm-router `--policy cache_aware`): the replica that was
  last sent the longest prefix of this request's blocks, if that covers at least `PREFIX_THRESHOLD`
  of them; otherwise the replica with the fewest requests so far. `kv_aware` differs in one way the
  replay does not model: it reads the engines' KV events, so a warmup can attract the request (the
  "CacheScout in front of the router" shape; measured on real sockets in tests/router).

`snapshot` (optional): a learned-state document (`ScoutPolicy.snapshot()`, what a replica loads
from `state_path`) that every replica's scout policy restores before its first request: the
"new replica starts from a shared snapshot" case.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from proxy.core.policy import ScoutPolicy
from proxy.replay.measure import RunRecorder
from proxy.replay.runner import POLICIES, ReplaySettings, make_policy, run_policy
from proxy.replay.tiers import resolve_cpu_capacity
from proxy.replay.traces import ReplayRequest, unique_blocks

ROUTINGS = ("round_robin", "session", "prefix")
PREFIX_THRESHOLD = 0.3  # vllm-router --cache-threshold default


def route(requests: Sequence[ReplayRequest], replicas: int, routing: str) -> list[int]:
    """The replica of each request under `routing` (deterministic)."""
    n = max(1, int(replicas))
    if routing not in ROUTINGS:
        raise ValueError(f"unknown routing {routing!r}; choose from {ROUTINGS}")
    if n == 1:
        return [0] * len(requests)
    if routing == "round_robin":
        return [i % n for i in range(len(requests))]
    if routing == "session":
        return [zlib.crc32((r.session_id or f"tenant:{r.tenant}").encode()) % n for r in requests]
    owner: dict[int, int] = {}
    load = [0] * n
    out: list[int] = []
    for r in requests:
        best, depth = None, 0
        for h in r.block_hashes:
            k = owner.get(h)
            if k is None:
                break
            best, depth = k, depth + 1
        if best is None or depth < PREFIX_THRESHOLD * max(1, len(r.block_hashes)):
            best = min(range(n), key=lambda k: (load[k], k))
        load[best] += 1
        for h in r.block_hashes:
            owner[h] = best
        out.append(best)
    return out


def _merge(recs: Sequence[RunRecorder], summaries: Sequence[dict], extras: Sequence[dict]) -> dict[str, Any]:
    prompt = sum(s["prompt_tokens"] for s in summaries)
    hit = sum(s["hit_tokens"] for s in summaries)
    reqs = sum(s["requests"] for s in summaries)
    ttft = np.concatenate([r.latencies()[0] for r in recs]) if recs else np.zeros(0)
    out: dict[str, Any] = {
        "requests": reqs,
        "prompt_tokens": prompt,
        "hit_tokens": hit,
        "hit_rate": hit / prompt if prompt else 0.0,
        "block_hit_rate": (sum(s["block_hit_rate"] * s["requests"] for s in summaries) / reqs) if reqs else 0.0,
        "warmup_tokens": sum(s["warmup_tokens"] for s in summaries),
        "warmup_s": sum(s["warmup_s"] for s in summaries),
        "prefill_s": sum(s["prefill_s"] for s in summaries),
        "ttft_mean_s": float(ttft.mean()) if len(ttft) else 0.0,
        "ttft_p50_s": float(np.percentile(ttft, 50)) if len(ttft) else 0.0,
        "ttft_p99_s": float(np.percentile(ttft, 99)) if len(ttft) else 0.0,
        "per_replica_requests": [s["requests"] for s in summaries],
    }
    if all("net_saved_vs_lru_s" in s for s in summaries):
        out["net_saved_vs_lru_s"] = sum(s["net_saved_vs_lru_s"] for s in summaries)
    preds = sum(int(e.get("predictions") or 0) for e in extras)
    if any("top1_accuracy" in e for e in extras):
        out["top1_accuracy"] = (
            (sum(e.get("top1_accuracy", 0.0) * int(e.get("predictions") or 0) for e in extras) / preds)
            if preds
            else 0.0
        )
        out["predictability"] = (
            (sum(e.get("predictability", 0.0) * s["requests"] for e, s in zip(extras, summaries, strict=False)) / reqs)
            if reqs
            else 0.0
        )
        out["predictions"] = preds
    return out


def _restore_after_setup(pol: Any, snapshot: dict) -> None:
    """Make `pol` restore `snapshot` right after its setup builds its ScoutPolicy, as the live proxy
    loads `state_path` at start (the policy module itself stays unchanged)."""
    setup = pol.setup

    def setup_then_restore(*args: Any, **kwargs: Any) -> None:
        setup(*args, **kwargs)
        pol.sp.restore(snapshot)

    pol.setup = setup_then_restore


def learned_snapshot(
    requests: Sequence[ReplayRequest],
    capacity: int,
    settings: ReplaySettings | None = None,
    policy: str = "scout-proxy",
) -> dict:
    """The state one proxy learns from `requests` (a past day, or another replica's traffic)."""
    s = settings or ReplaySettings()
    pol = make_policy(policy, s)
    run_policy(pol, requests, capacity, s.cost, None, s.engines, 0, s.block_size)
    sp = getattr(pol, "sp", None)  # the scout policies' core (ReplayPolicy itself has none)
    if not isinstance(sp, ScoutPolicy):
        raise ValueError(f"policy {policy!r} learns no CacheScout state")
    return sp.snapshot()


def replay_fleet(
    requests: Sequence[ReplayRequest],
    capacity: int,
    policies: Sequence[str],
    replicas: int,
    routing: str,
    settings: ReplaySettings | None = None,
    snapshot: dict | None = None,
) -> dict:
    """Every policy on an N-replica fleet (each replica `capacity` blocks). JSON-ready dict."""
    s = settings or ReplaySettings()
    names = list(dict.fromkeys(["lru", *policies]))
    for n in names:
        if n not in POLICIES:
            raise ValueError(f"unknown policy {n!r}; choose from {POLICIES}")
    assign = route(requests, replicas, routing)
    subs: list[list[ReplayRequest]] = [[] for _ in range(max(1, replicas))]
    for r, k in zip(requests, assign, strict=False):
        subs[k].append(r)
    span = (requests[-1].t - requests[0].t) if requests else 0.0
    out: dict[str, Any] = {
        "replicas": int(replicas),
        "routing": routing,
        "capacity_blocks_per_replica": int(capacity),
        "requests": len(requests),
        "unique_blocks": unique_blocks(requests),
        "snapshot": snapshot is not None,
        "policies": {},
    }
    lru_recs: list[RunRecorder | None] = [None] * len(subs)
    cpu = resolve_cpu_capacity(s.cpu_capacity, int(capacity), out["unique_blocks"])  # per replica, like the GPU
    out["cpu_capacity_blocks_per_replica"] = cpu
    for name in names:
        recs, summaries, extras = [], [], []
        t0 = time.perf_counter()
        for k, sub in enumerate(subs):
            if not sub:
                continue
            pol = make_policy(name, s)
            if snapshot is not None and name.startswith("scout-"):
                _restore_after_setup(pol, snapshot)
            rec = run_policy(pol, sub, capacity, s.cost, None, s.engines, cpu, s.block_size)
            if name == "lru":
                lru_recs[k] = rec
            sub_span = sub[-1].t - sub[0].t
            summaries.append(rec.summary(sub_span, s.latency_budget_s, lru_recs[k] if name != "lru" else None))
            recs.append(rec)
            extras.append(pol.extra())
        merged = _merge(recs, summaries, extras)
        merged["replay_seconds"] = time.perf_counter() - t0
        out["policies"][name] = merged
    lru = out["policies"]["lru"]
    for summ in out["policies"].values():
        summ["gain_vs_lru_pp"] = 100.0 * (summ["hit_rate"] - lru["hit_rate"])
    out["span_s"] = span
    return out


def scale_table(
    requests: Sequence[ReplayRequest],
    capacity: int,
    replica_counts: Sequence[int],
    routings: Sequence[str],
    policy: str = "scout-proxy",
    settings: ReplaySettings | None = None,
    snapshot: dict | None = None,
    stream_for: Callable[[int], Sequence[ReplayRequest]] | None = None,
) -> list[dict]:
    """Learning at scale: for each routing and N, the scout policy's hit rate, its gain over LRU,
    top-1 next-agent accuracy and predictability R, merged over the fleet. `stream_for(n)` gives
    the stream for N replicas (e.g. N times the sessions: constant load per replica); default:
    the same stream split N ways."""
    rows = []
    for routing in routings:
        for n in replica_counts:
            reqs = stream_for(n) if stream_for is not None else requests
            res = replay_fleet(reqs, capacity, [policy], n, routing, settings, snapshot)
            p, lru = res["policies"][policy], res["policies"]["lru"]
            rows.append(
                {
                    "routing": routing,
                    "replicas": n,
                    "lru_hit_rate": lru["hit_rate"],
                    "hit_rate": p["hit_rate"],
                    "gain_pp": p["gain_vs_lru_pp"],
                    "top1_accuracy": p.get("top1_accuracy"),
                    "predictability": p.get("predictability"),
                    "ttft_mean_s": p["ttft_mean_s"],
                    "lru_ttft_mean_s": lru["ttft_mean_s"],
                    "warmup_tokens": p["warmup_tokens"],
                    "net_saved_vs_lru_s": p.get("net_saved_vs_lru_s"),
                }
            )
    return rows


def format_scale_table(rows: Sequence[dict]) -> str:
    lines = [
        "| routing | replicas | LRU hit | scout hit | gain (pp) | top-1 acc | R | TTFT LRU → scout (ms) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        acc = "—" if r["top1_accuracy"] is None else f"{r['top1_accuracy']:.2f}"
        pr = "—" if r["predictability"] is None else f"{r['predictability']:.2f}"
        lines.append(
            f"| {r['routing']} | {r['replicas']} | {r['lru_hit_rate']:.3f} | {r['hit_rate']:.3f} | "
            f"{r['gain_pp']:+.1f} | {acc} | {pr} | {1000 * r['lru_ttft_mean_s']:.0f} → "
            f"{1000 * r['ttft_mean_s']:.0f} |"
        )
    return "\n".join(lines)


__all__ = ["ROUTINGS", "format_scale_table", "learned_snapshot", "replay_fleet", "route", "scale_table"]
