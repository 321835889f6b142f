"""Regime measurements for generated workloads: offered work, running set, live and idle sessions.

Why: issue 21's audit found the presets made cache pressure by shrinking the cache while only
2.4–6.4 requests ran at once. The grid (`grid.py`) instead sets the regime by workload parameters
and sizes the cache from the *running set*, so each cell says what it is:

- `session_work_s`: the engine seconds a session's requests need at a perfect cache (each request
  prefills only the blocks no earlier request made; decode at one row of a nominal batch): the
  offered work behind `WorkloadSpec.busy` (the least any policy can do, so a busy share of 90%
  means near saturation for every policy, and above it for one that misses);
- `running_set`: distinct blocks of the requests in flight (arrival → nominal prefill + decode
  end) sampled at each arrival; the grid's capacities are multiples of its p90;
- `occupancy`: time-averaged live sessions (first request → last response) and idle ones (live,
  nothing in flight: paused on a tool or thinking), the "many idle sessions" the audit asked for.

Pause profiles (`PAUSES`) are the tool-duration mixtures the grid sweeps; docs/replay.md "Regimes"
gives the public evidence they are calibrated on.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from proxy.cachemodel.cost_model import CostModel
from proxy.replay.traces import ReplayRequest

# (weight, lo s, hi s) log-uniform mixtures of tool durations
PAUSES: dict[str, tuple[tuple[float, float, float], ...]] = {
    # vllm-project/router#285: in a 32-task, 16-concurrency coding-agent trace 86.46% of adjacent
    # same-agent requests returned within 1 s and 95.12% within 10 s
    "fast": ((0.86, 0.05, 1.0), (0.09, 1.0, 10.0), (0.05, 10.0, 120.0)),
    # tool runs dominated by tests, builds and web fetches: seconds to minutes
    "slow": ((0.4, 0.05, 1.0), (0.3, 1.0, 10.0), (0.3, 10.0, 180.0)),
}
# think/orchestration gaps are stretched by this factor in the "slow" profile (human think time
# in the chat preset, orchestration in the others)
GAP_SCALE = {"fast": 1.0, "slow": 4.0}


def decode_token_s(cost: CostModel, batch: int) -> float:
    """Engine seconds per output token at one row of a `batch`-row decode step."""
    return cost.decode_seq_s + cost.step_base_s / max(1, batch)


def session_work_s(sessions: Sequence[Sequence[tuple[float, ReplayRequest]]], cost: CostModel, batch: int) -> float:
    """Engine seconds of all sessions' requests at a perfect cache (see the module doc)."""
    seen: set[int] = set()
    per_out = decode_token_s(cost, batch)
    total = 0.0
    for sess in sessions:
        for _, r in sess:
            cached = 0
            for h, n in zip(r.block_hashes, r.block_tokens, strict=True):
                if h not in seen:
                    break
                cached += n
            seen.update(r.block_hashes)
            total += cost.prefill_s(r.prompt_tokens, cached) + r.output_tokens * per_out
    return total


def nominal_end(r: ReplayRequest, cost: CostModel, batch: int) -> float:
    """A request's nominal response end: isolated cold prefill, then decode at a `batch`-row step."""
    return r.t + cost.prefill_s(r.prompt_tokens) + r.output_tokens * (cost.step_base_s + cost.decode_seq_s * batch)


def running_set(requests: Sequence[ReplayRequest], cost: CostModel | None = None, batch: int = 16) -> dict:
    """Distinct blocks (and requests) in flight, sampled at each arrival: mean, p50, p90, max."""
    cost = cost or CostModel()
    ends: list[tuple[float, int]] = []

    refs: dict[int, int] = {}
    blocks: list[int] = []
    inflight: list[int] = []
    for i, r in enumerate(requests):
        while ends and ends[0][0] <= r.t:
            _, j = heapq.heappop(ends)
            for h in requests[j].block_hashes:
                c = refs[h] - 1
                if c:
                    refs[h] = c
                else:
                    del refs[h]
        for h in r.block_hashes:
            refs[h] = refs.get(h, 0) + 1
        heapq.heappush(ends, (nominal_end(r, cost, batch), i))
        blocks.append(len(refs))
        inflight.append(len(ends))
    if not blocks:
        return {"blocks_mean": 0.0, "blocks_p50": 0, "blocks_p90": 0, "blocks_max": 0, "requests_mean": 0.0}
    arr = np.array(blocks)
    return {
        "blocks_mean": float(arr.mean()),
        "blocks_p50": int(np.percentile(arr, 50)),
        "blocks_p90": int(np.percentile(arr, 90)),
        "blocks_max": int(arr.max()),
        "requests_mean": float(np.mean(inflight)),
    }


def occupancy(requests: Sequence[ReplayRequest], cost: CostModel | None = None, batch: int = 16) -> dict:
    """Time-averaged live and idle sessions (idle: live with nothing in flight), and the idle ones
    paused on a tool call; nominal latencies as in `running_set`."""
    cost = cost or CostModel()
    by_session: dict[str, list[ReplayRequest]] = {}
    for r in requests:
        if r.session_id is not None:
            by_session.setdefault(r.session_id, []).append(r)
    if not requests:
        return {"sessions_live_mean": 0.0, "sessions_idle_mean": 0.0, "sessions_tool_idle_mean": 0.0}
    span = max(nominal_end(r, cost, batch) for r in requests) - requests[0].t
    live = idle = tool_idle = 0.0
    for reqs in by_session.values():
        end = reqs[0].t
        start = reqs[0].t
        busy_end = start
        for k, r in enumerate(reqs):
            if r.t > busy_end:
                gap = r.t - busy_end
                idle += gap
                if k and reqs[k - 1].finish_reason == "tool_calls":
                    tool_idle += gap
            busy_end = max(busy_end, nominal_end(r, cost, batch))
            end = max(end, busy_end)
        live += end - start
    span = max(span, 1e-9)
    return {
        "sessions_live_mean": live / span,
        "sessions_idle_mean": idle / span,
        "sessions_tool_idle_mean": tool_idle / span,
    }


def scale_session_starts(requests: Sequence[ReplayRequest], factor: float) -> list[ReplayRequest]:
    """The same sessions with their start times divided by `factor` (the session-arrival rate times
    `factor`); every request keeps its offset from its session's start, so tool pauses, think
    times and in-session gaps are unchanged. Requests without a session keep their own time / factor."""

    first: dict[str, float] = {}
    out: list[tuple[float, int, ReplayRequest]] = []
    for i, r in enumerate(requests):
        if r.session_id is None:
            t = r.t / factor
        else:
            s0 = first.setdefault(r.session_id, r.t)
            t = s0 / factor + (r.t - s0)
        out.append((t, i, r))
    out.sort(key=lambda x: (x[0], x[1]))
    return [replace(r, t=round(t, 6)) for t, _, r in out]


def busy_share(requests: Sequence[ReplayRequest], cost: CostModel | None = None, batch: int = 16) -> dict:
    """Offered engine busy share at a perfect cache (`session_work_s`' work / time): over the whole
    stream, and over its steady window (from the first session start + the median session length to
    the last session start; None when sessions are so long the stream never gets there)."""
    cost = cost or CostModel()
    if not requests:
        return {"busy_offered": 0.0, "busy_offered_steady": None}
    seen: set[int] = set()
    per_out = decode_token_s(cost, batch)
    work = []
    for r in requests:
        cached = 0
        for h, n in zip(r.block_hashes, r.block_tokens, strict=True):
            if h not in seen:
                break
            cached += n
        seen.update(r.block_hashes)
        work.append(cost.prefill_s(r.prompt_tokens, cached) + r.output_tokens * per_out)
    span = max(nominal_end(r, cost, batch) for r in requests) - requests[0].t
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for r in requests:
        if r.session_id is not None:
            first.setdefault(r.session_id, r.t)
            last[r.session_id] = r.t
    steady = None
    if first:
        length = float(np.median([last[s] - first[s] for s in first]))
        a, b = min(first.values()) + length, max(first.values())
        if b > a:
            steady = sum(w for r, w in zip(requests, work, strict=True) if a <= r.t < b) / (b - a)
    return {"busy_offered": sum(work) / max(span, 1e-9), "busy_offered_steady": steady}
