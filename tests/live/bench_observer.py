"""Observer cost on the request path (not collected by pytest): run
`.venv/bin/python tests/live/bench_observer.py`. Prints the on_request hook time inside an event loop
(bookkeeping + call_soon) and the deferred view + observe + plan time for ~1.2k-token chat prompts."""

import asyncio
import json
import time

from prometheus_client import CollectorRegistry

from proxy.contracts import RequestContext
from proxy.core.policy import ScoutPolicy
from proxy.harness.workload import DemoSpec, build_agents
from proxy.observability.metrics import ProxyMetrics
from proxy.runtime.live_policy import LivePolicyObserver

agents = build_agents(DemoSpec(agents=8))
obs = LivePolicyObserver(ScoutPolicy(), ProxyMetrics(CollectorRegistry()), time.perf_counter, defer=False)


class Ex:
    sending = 0  # the executor's actions in flight (read by the observer's alone-check)

    def submit(self, a):
        return len(a)


obs.executor = Ex()
N = 400
on_req = []
total = []
for i in range(N):
    a = agents[i % 8]
    body = {
        "model": "m",
        "messages": [{"role": "system", "content": a.system}, {"role": "user", "content": "task " + "x y " * 200}],
        "tools": list(a.tools or []),
        "stream": True,
        "user": f"s{i % 16}",
    }
    raw = json.dumps(body).encode()
    ctx = RequestContext(
        i,
        "POST",
        "/v1/chat/completions",
        {"content-type": "application/json"},
        raw,
        json.loads(raw),
        time.perf_counter(),
    )
    obs.defer = True
    t0 = time.perf_counter()
    obs.on_request(ctx)
    on_req.append(time.perf_counter() - t0)  # no loop: falls back inline
    # measure the deferred work explicitly
    st = ctx.state["cachescout"]
    t0 = time.perf_counter()
    obs._observe_request(ctx, st)
    total.append(time.perf_counter() - t0)
on_req.sort()
total.sort()
print(
    f"prompt chars ~{len(agents[0].system) + 400}; "
    f"on_request hook (no event loop -> inline incl. observe) p50 {on_req[N // 2] * 1e6:.0f} us"
)
print(f"deferred view+observe+plan p50 {total[N // 2] * 1e6:.0f} us p99 {total[int(N * 0.99)] * 1e6:.0f} us")


async def main():
    hook = []
    for i in range(N):
        a = agents[i % 8]
        body = {
            "model": "m",
            "messages": [{"role": "system", "content": a.system}, {"role": "user", "content": "task " + "x y " * 200}],
            "tools": list(a.tools or []),
            "stream": True,
            "user": f"s{i % 16}",
        }
        raw = json.dumps(body).encode()
        ctx = RequestContext(
            10000 + i,
            "POST",
            "/v1/chat/completions",
            {"content-type": "application/json"},
            raw,
            json.loads(raw),
            time.perf_counter(),
        )
        t0 = time.perf_counter()
        obs.on_request(ctx)
        hook.append(time.perf_counter() - t0)
        await asyncio.sleep(0)
    hook.sort()
    print(
        "on_request hook inside the event loop (deferred): "
        f"p50 {hook[N // 2] * 1e6:.1f} us p99 {hook[int(N * 0.99)] * 1e6:.1f} us"
    )


asyncio.run(main())
