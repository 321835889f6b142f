"""Benchmark (not a test): what the session header costs on the request path (issue 38, item 1).

    .venv/bin/python benchmarks/session_header_overhead.py [--requests 2000] [--repeat 3]

The proxy's `X-Session-ID` needs the request's view before the forward (`forward_headers`), so the
view is built on the request path instead of just after it (the deferred observation reuses it).
Two live observers over fresh, identical policies see the same stream of ~1.2k-token chat requests
(8 agents, 64 conversations, no session ids), interleaved request by request:
- ``header off``: ``session_header=false``: `forward_headers` returns at once; the view is built in
  the deferred step (`_build_view`), as before issue 38;
- ``header on``: the default.
Per request, per-thread CPU time of the inline part (`forward_headers`, before the forward) and of
the deferred part (view if not built yet + observe + plan), and of both together.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hints_overhead import _Executor, requests
from prometheus_client import CollectorRegistry

from proxy.core.policy import ScoutPolicy
from proxy.core.view import ResponseOutcome
from proxy.observability.metrics import ProxyMetrics
from proxy.runtime.live_policy import LivePolicyObserver

VARIANTS = ("header off", "header on")


def observer(variant: str) -> LivePolicyObserver:
    obs = LivePolicyObserver(ScoutPolicy(), ProxyMetrics(CollectorRegistry()), time.perf_counter, defer=False)
    obs.executor = _Executor()
    obs.session_header = variant == "header on"
    return obs


def run(n: int) -> dict:
    streams = {v: requests(n) for v in VARIANTS}
    for v in VARIANTS:
        for ctx in streams[v]:
            assert isinstance(ctx.json, dict)
            ctx.json.pop("user", None)  # an app that sends no id at all
    obs = {v: observer(v) for v in VARIANTS}
    inline: dict[str, list[float]] = {v: [] for v in VARIANTS}
    deferred: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for i in range(n):
        for v in VARIANTS:
            ctx = streams[v][i]
            o = obs[v]
            o.on_request(ctx)  # no event loop: bookkeeping, and a view built now (discarded below)
            st = ctx.state["cachescout"]
            st.observed = None
            st.view = None  # as when the forwarder calls forward_headers: the view is not built yet
            t0 = time.thread_time()
            o.forward_headers(ctx)
            t1 = time.thread_time()
            st.accepted = True
            o._build_view(ctx, st)  # the deferred work: view (unless built inline) + observe + plan
            t2 = time.thread_time()
            inline[v].append(t1 - t0)
            deferred[v].append(t2 - t1)
            if st.observed is not None:
                o.policy.observe_response(st.observed.request_id, ResponseOutcome("stop"), ctx.started + 0.5)
    warm = n // 5
    out = {}
    for v in VARIANTS:
        tot = [a + b for a, b in zip(inline[v][warm:], deferred[v][warm:], strict=True)]
        out[v] = {
            "inline_p50_us": statistics.median(inline[v][warm:]) * 1e6,
            "deferred_p50_us": statistics.median(deferred[v][warm:]) * 1e6,
            "total_p50_us": statistics.median(tot) * 1e6,
            "total_mean_us": statistics.fmean(tot) * 1e6,
            "tagged": obs[v].counts.get("session_tagged", 0),
            "conversations": len(obs[v].tags),
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = [run(args.requests) for _ in range(args.repeat)]
    print(f"per request, {args.requests} requests x {args.repeat} runs (CPU time, medians over runs):")
    for v in VARIANTS:

        def med(key: str, v: str = v) -> float:
            return statistics.median(r[v][key] for r in rows)

        print(
            f"  {v:11s} inline (before the forward) p50 {med('inline_p50_us'):7.1f} us  deferred p50 "
            f"{med('deferred_p50_us'):7.1f} us  total p50 {med('total_p50_us'):7.1f} us  mean "
            f"{med('total_mean_us'):7.1f} us  tagged {rows[0][v]['tagged']}  ids {rows[0][v]['conversations']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
