"""Replay runner: drives each policy over one request stream in virtual time, deterministically.

Every policy runs on the same `SimEngine` (`engine_run.py`): each request is submitted at its
arrival time and the engine is stepped in virtual time, so hits, TTFT and per-turn latency are the
engine's (continuous batching, token budget, admission when blocks fit). A policy differs only in
the engine pool's eviction order, the actions it submits as engine requests, and pins.

`lru` and `belady` always run (they define the gap every other policy is measured against), so a
report can say what share of the LRU→Belady gap each policy closes. `belady` is pinned Belady on
that engine: the bound for any eviction order (not for policies that also warm: a warm is a
prefetch, which demand-paging Belady does not do).

`cpu_capacity` puts the engine's host-memory tier (LRU, write-through; `host_tier.py`) behind every
policy's GPU cache; the report then adds GPU hits, host loads, recompute and the share of the
LRU→Belady *TTFT* gap each policy closes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from proxy.cachemodel.cost_model import CostModel
from proxy.replay.cache_only import SESSION_POLICIES
from proxy.replay.engine_run import run_on_engine
from proxy.replay.measure import RunRecorder
from proxy.replay.policies import BeladyPolicy, HistoryPolicy, LruPolicy, ReplayPolicy, TtlPolicy
from proxy.replay.tiers import resolve_cpu_capacity
from proxy.replay.traces import ReplayRequest, unique_blocks

POLICIES = ("lru", "history", "ttl", "scout-engine", "scout-proxy", "scout-proxy-priority", "oracle-keeper", "belady")
# the oracle keeper's decomposition (oracle_blind.py): opt-in, and in the grid's policies
BLIND_POLICIES = ("oracle-keeper-blind", "gap-keeper", "tool-gap-keeper")
# scout-proxy with a runtime sending hints (truthful, noisy, lying; proxy/replay/hint_stream.py):
# opt-in by name, not in the default --policies list
HINT_POLICIES = (
    "scout-proxy+hints",
    "scout-proxy+noisy-hints",
    "scout-proxy+all-hints",
    "scout-proxy+liar",
    "scout-proxy+hints+liar",
)
# scout-proxy with the slack lane (engine under vLLM's priority policy, actions at the lowest
# priority; lanes.py): opt-in by name
LANE_POLICIES = ("scout-proxy-lane",)
# session references (session_refs.py; SESSION_POLICIES from cache_only.py): which paused
# session's context to keep; opt-in by name


@dataclass
class ReplaySettings:
    block_size: int = 16
    latency_budget_s: float = 1.0
    ttl_s: float = 10.0
    scout_overrides: dict = field(default_factory=dict)
    use_sessions: bool = True
    engines: int = 1  # prefill servers sharing one cache: one engine computing `engines` times faster
    retention_s: float = 300.0  # priority engine: a block's priority decays after this idle time
    cost: CostModel = field(default_factory=CostModel)
    proxy_settings: Any = None  # the proxy's Settings (None = defaults); scout_overrides go over
    # its policy_overrides; the same builder as the live proxy
    cpu_capacity: str | None = None  # host tier: "4x" (of the GPU capacity), a share, or blocks; None = none


def make_policy(name: str, s: ReplaySettings) -> ReplayPolicy:
    if name == "lru":
        return LruPolicy()
    if name == "belady":
        return BeladyPolicy()
    if name == "history":
        return HistoryPolicy()
    if name == "ttl":
        return TtlPolicy(s.ttl_s)
    if name == "oracle-keeper":
        from proxy.replay.oracle import OracleKeeperPolicy

        return OracleKeeperPolicy()
    if name in SESSION_POLICIES:
        from proxy.replay.session_refs import SessionRefPolicy

        return SessionRefPolicy(name)
    if name in BLIND_POLICIES:
        from proxy.replay.oracle_blind import GapKeeperPolicy, OracleKeeperBlindPolicy, ToolGapKeeperPolicy

        blind = {"oracle-keeper-blind": OracleKeeperBlindPolicy, "gap-keeper": GapKeeperPolicy}
        return blind.get(name, ToolGapKeeperPolicy)()
    if name in ("scout-proxy", "scout-proxy-priority", "scout-engine", "scout-proxy-lane"):
        from proxy.replay.scout import ScoutProxyLanePolicy, ScoutProxyPolicy, ScoutProxyPriorityPolicy
        from proxy.replay.scout_engine import ScoutEnginePolicy

        cls = {
            "scout-proxy": ScoutProxyPolicy,
            "scout-proxy-priority": ScoutProxyPriorityPolicy,
            "scout-engine": ScoutEnginePolicy,
            "scout-proxy-lane": ScoutProxyLanePolicy,
        }[name]
        from proxy.replay.scout import default_settings

        base = s.proxy_settings
        if base is None:
            settings = default_settings(s.scout_overrides)
        else:
            settings = base.model_copy(update={"policy_overrides": {**base.policy_overrides, **s.scout_overrides}})
        pol = cls(s.scout_overrides, s.use_sessions, s.block_size, settings=settings)
        pol.retention_s = s.retention_s
        return pol
    if name in HINT_POLICIES:
        from proxy.replay.scout_hints import make_hint_policy

        pol = make_hint_policy(name, s.scout_overrides, s.use_sessions, s.block_size)
        pol.retention_s = s.retention_s
        return pol
    raise ValueError(f"unknown policy {name!r}; choose from {POLICIES + LANE_POLICIES}")


def resolve_capacity(spec: float | int | str, requests: Sequence[ReplayRequest]) -> int:
    """`0.05` (below 1) or `5%`: share of the stream's unique blocks; an integer >= 1: blocks."""
    if isinstance(spec, str):
        spec = spec.strip()
        if spec.endswith("%"):
            return round(float(spec[:-1]) / 100.0 * unique_blocks(requests))
        spec = float(spec)
    if spec < 1:
        return round(float(spec) * unique_blocks(requests))
    return int(spec)


def resume_mask(requests: Sequence[ReplayRequest]) -> np.ndarray:
    """True for a request whose session's previous request ended in a tool call (a tool resume)."""
    last: dict[str, str | None] = {}
    out = np.zeros(len(requests), dtype=bool)
    for i, r in enumerate(requests):
        if r.session_id is None:
            continue
        out[i] = last.get(r.session_id) == "tool_calls"
        last[r.session_id] = r.finish_reason
    return out


# One policy over the stream on the simulated engine (with a host tier of `cpu_blocks`).
run_policy = run_on_engine


def _bar(name: str, n: int, enabled: bool) -> Callable[[int], None] | None:
    if not enabled or n == 0:
        return None

    if not sys.stderr.isatty():
        # Logs (CI, `> file`): one line per 10% per phase, never carriage-return bars.
        last = [-1]

        def log_line(i: int) -> None:
            decile = (10 * (i + 1)) // n
            if decile > last[0]:
                last[0] = decile
                sys.stderr.write(f"  {name:<22} {10 * decile:3d}% ({i + 1}/{n})\n")

        return log_line

    def show(i: int) -> None:
        done = int(30 * (i + 1) / n)
        sys.stderr.write(f"\r  {name:<22} [{'#' * done}{'.' * (30 - done)}] {i + 1}/{n}")
        sys.stderr.flush()

    return show


def replay(
    requests: Sequence[ReplayRequest],
    capacities: Sequence[int],
    policies: Sequence[str],
    settings: ReplaySettings | None = None,
    progress: bool = False,
) -> dict:
    """Every policy at every capacity. Returns a JSON-ready dict (see report.py for its shape)."""
    s = settings or ReplaySettings()
    names = list(dict.fromkeys(["lru", *policies, "belady"]))
    for n in names:
        known = POLICIES + HINT_POLICIES + LANE_POLICIES + BLIND_POLICIES + SESSION_POLICIES
        if n not in known:
            raise ValueError(f"unknown policy {n!r}; choose from {known}")
    span = (requests[-1].t - requests[0].t) if requests else 0.0
    out: dict = {
        "policies": names,
        "capacities": [],
        "span_s": span,
        "requests": len(requests),
        "unique_blocks": unique_blocks(requests),
    }
    for cap in capacities:
        cpu = resolve_cpu_capacity(s.cpu_capacity, int(cap), out["unique_blocks"])
        row: dict = {"capacity_blocks": int(cap), "cpu_capacity_blocks": cpu, "policies": {}}
        recs: dict[str, RunRecorder] = {}
        for name in names:
            pol = make_policy(name, s)
            t0 = time.perf_counter()
            rec = run_policy(
                pol,
                requests,
                cap,
                s.cost,
                _bar(f"{name} @ {cap}", len(requests), progress),
                s.engines,
                cpu,
                s.block_size,
            )
            elapsed = time.perf_counter() - t0
            if progress:
                sys.stderr.write(
                    f"  {elapsed:.2f}s\n" if sys.stderr.isatty() else f"  {name} @ {cap}: done in {elapsed:.2f}s\n"
                )
            recs[name] = rec
            summ = rec.summary(span, s.latency_budget_s, recs.get("lru") if name != "lru" else None)
            summ["replay_seconds"] = elapsed
            summ["replay_rps"] = len(requests) / elapsed if elapsed > 0 else 0.0
            summ["extra"] = pol.extra()
            summ["_leads"] = rec.lead_samples()
            summ["_ttft"] = rec.latencies()[0]
            if any(r.finish_reason == "tool_calls" for r in requests):
                from proxy.replay.scout_hints import resume_latency

                summ.update(resume_latency(rec, requests))
            row["policies"][name] = summ
        lru = row["policies"]["lru"]
        bel = row["policies"]["belady"]
        for summ in row["policies"].values():
            summ["gap_closed"] = gap_share(summ["hit_rate"], lru["hit_rate"], bel["hit_rate"])
            summ["gap_closed_blocks"] = gap_share(summ["block_hit_rate"], lru["block_hit_rate"], bel["block_hit_rate"])
            # TTFT: lower is better, so the gap runs from LRU's TTFT down to Belady's
            summ["ttft_gap_closed"] = gap_share(-summ["ttft_mean_s"], -lru["ttft_mean_s"], -bel["ttft_mean_s"])
            if None not in (
                summ.get("ttft_resume_mean_s"),
                lru.get("ttft_resume_mean_s"),
                bel.get("ttft_resume_mean_s"),
            ):
                summ["ttft_resume_gap_closed"] = gap_share(
                    -summ["ttft_resume_mean_s"], -lru["ttft_resume_mean_s"], -bel["ttft_resume_mean_s"]
                )
        out["capacities"].append(row)
    return out


def gap_share(hit: float, lru: float, bound: float) -> float | None:
    """Share of the LRU→Belady gap a hit rate closes (None when there is no gap)."""
    gap = bound - lru
    if gap <= 1e-12:
        return None
    return (hit - lru) / gap
