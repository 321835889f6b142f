"""Benchmark (not a test): what runtime hints cost per request when a request carries none.

    .venv/bin/python benchmarks/hints_overhead.py [--requests 3000] [--repeat 5]

Before/after in one run: two live observers over fresh, identical policies see the same stream of
~1.2k-token chat requests (8 agents, 64 sessions; no hint fields, no hints sent):
- ``hints off``: ``hints_enabled=false`` (no HintService: the code before issue 16);
- ``hints on``: the default (the service reads each request for hint fields and agent names);
- ``hints on, one hint seen``: as above after one hint for an unrelated session, so the planner
  hook is attached and the driver has a check pending (the worst idle case).
Each request's deferred work (view + observe + plan, ``LivePolicyObserver._observe_request``) is
timed with per-thread CPU time, the variants interleaved request by request so the shared
machine's load hits all alike; the extra bytecodes executed per request are counted exactly.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from proxy.contracts import RequestContext
from proxy.core.hint_actions import Hint
from proxy.core.policy import ScoutPolicy
from proxy.core.view import ResponseOutcome
from proxy.harness.workload import DemoSpec, build_agents
from proxy.observability.metrics import ProxyMetrics
from proxy.runtime.hint_inputs import build_hint_service
from proxy.runtime.live_policy import LivePolicyObserver
from proxy.settings import Settings

VARIANTS = ("hints off", "hints on", "hints on, one hint seen")


class _Executor:
    sending = 0  # nothing on the wire (the observer reads it per request)

    def submit(self, actions) -> int:
        return len(actions)


def observer(variant: str) -> LivePolicyObserver:
    metrics = ProxyMetrics(CollectorRegistry())
    policy = ScoutPolicy()
    obs = LivePolicyObserver(policy, metrics, time.perf_counter, defer=False)
    obs.executor = _Executor()
    if variant != "hints off":
        obs.hints = build_hint_service(Settings(), policy, metrics)
    if variant == "hints on, one hint seen":
        obs.hints.driver.submit([Hint("tool_started", "elsewhere")], "bench", 0.0)
    return obs


def requests(n: int) -> list[RequestContext]:
    agents = build_agents(DemoSpec(agents=8))
    out = []
    for i in range(n):
        a = agents[i % 8]
        body = {
            "model": "m",
            "messages": [
                {"role": "system", "content": a.system},
                {"role": "user", "content": f"task {i % 64} " + "x y " * 200},
            ],
            "tools": list(a.tools or []),
            "stream": True,
            "user": f"s{i % 64}",
        }
        raw = json.dumps(body).encode()
        out.append(
            RequestContext(
                i, "POST", "/v1/chat/completions", {"content-type": "application/json"}, raw, json.loads(raw), 0.001 * i
            )
        )
    return out


def count_bytecodes(fn) -> int:
    n = 0

    def trace(frame, event, arg):
        nonlocal n
        frame.f_trace_opcodes = True
        if event == "opcode":
            n += 1
        return trace

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return n


def run(n: int) -> dict:
    streams = {v: requests(n) for v in VARIANTS}
    obs = {v: observer(v) for v in VARIANTS}
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for i in range(n):
        for v in VARIANTS:
            ctx = streams[v][i]
            o = obs[v]
            o.on_request(ctx)  # no event loop: bookkeeping, then inline observe
            st = ctx.state["cachescout"]
            st.observed = None
            st.view = None
            st.accepted = True  # the engine's 2xx: the observation runs once the view is built
            t0 = time.thread_time()
            o._build_view(ctx, st)  # view, observe_request, hints, plan: the deferred work
            times[v].append(time.thread_time() - t0)
            if st.observed is not None:
                o.policy.observe_response(st.observed.request_id, ResponseOutcome("stop"), ctx.started + 0.5)
    codes = {}
    for v in VARIANTS:
        ctx = requests(1)[0]
        ctx.request_id = 10**6
        o = obs[v]
        o.on_request(ctx)
        st = ctx.state["cachescout"]
        st.observed = st.view = None
        st.accepted = True
        codes[v] = count_bytecodes(lambda o=o, ctx=ctx, st=st: o._build_view(ctx, st))
    warm = n // 5
    return {
        v: {
            "mean_us": round(statistics.fmean(times[v][warm:]) * 1e6, 1),
            "p50_us": round(statistics.median(times[v][warm:]) * 1e6, 1),
            "bytecodes": codes[v],
        }
        for v in VARIANTS
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rows = [run(args.requests) for _ in range(args.repeat)]
    print(f"deferred observe+plan per request, {args.requests} requests x {args.repeat} runs (CPU time):")
    base = statistics.median(r["hints off"]["p50_us"] for r in rows)
    for v in VARIANTS:
        p50 = statistics.median(r[v]["p50_us"] for r in rows)
        mean = statistics.median(r[v]["mean_us"] for r in rows)
        print(
            f"  {v:26s} p50 {p50:7.1f} us  mean {mean:7.1f} us  ({100 * (p50 - base) / base:+.1f}% p50)  "
            f"bytecodes/request {rows[0][v]['bytecodes']}"
        )
    spread = [r["hints off"]["p50_us"] for r in rows]
    print(f"  run-to-run p50 spread of 'hints off': {min(spread):.1f}..{max(spread):.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
