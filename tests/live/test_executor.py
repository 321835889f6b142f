"""ActionExecutor: every action ends in exactly one outcome; stale, busy, full and duplicate handling."""

import asyncio

from prometheus_client import CollectorRegistry

from proxy.core.action_payload import ActionPayload
from proxy.core.actions import Action
from proxy.engines.base import WarmResult
from proxy.observability.metrics import ProxyMetrics
from proxy.runtime.executor import ActionExecutor, ExecutorLimits


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class FakeAdapter:
    def __init__(self, delay=0.0, ok=True):
        self.calls = []
        self.delay = delay
        self.ok = ok

    async def warm(self, action):
        self.calls.append(action.anchor_id)
        await asyncio.sleep(self.delay)
        return (
            WarmResult(ok=self.ok, prompt_tokens=100, cached_tokens=60) if self.ok else WarmResult(ok=False, error="x")
        )


def act(anchor="a1", deadline=200.0, h=1, reason="transition"):
    return Action(
        "touch",
        reason,
        "",
        anchor,
        (h,),
        100,
        ActionPayload({"messages": [{"role": "system", "content": "s"}]}),
        0,
        100.0,
        deadline,
    )


def outcome(m, outcome, reason="transition"):
    return m.actions_total.labels(kind="touch", reason=reason, outcome=outcome)._value.get()


async def test_ok_stale_dedupe_and_results():
    m = ProxyMetrics(CollectorRegistry())
    clock = Clock()
    results = []
    ad = FakeAdapter(delay=0.02)
    ex = ActionExecutor(
        ad, m, clock, ExecutorLimits(concurrency=1), on_result=lambda a, r, now: results.append((a.anchor_id, r))
    )
    await ex.start()
    ex.submit([act("a1"), act("a1"), act("a2", deadline=50.0, h=2)])  # duplicate and already stale
    await ex.drain()
    await ex.stop()
    assert ad.calls == ["a1"]
    assert outcome(m, "ok") == 1 and outcome(m, "dropped_stale") == 1
    assert ex.stats["deduped"] == 1
    assert len(results) == 3  # the core hears about every action
    assert m.warmup_tokens_total._value.get() == 100
    assert ex.stats["warm_computed_tokens"] == 40


async def test_yields_to_traffic_then_drops_busy():
    m = ProxyMetrics(CollectorRegistry())
    clock = Clock()
    load = {"inflight": 10}
    ad = FakeAdapter()
    ex = ActionExecutor(ad, m, clock, ExecutorLimits(max_inflight=4), load=lambda: (load["inflight"], 0))
    await ex.start()
    ex.submit([act("a1", deadline=100.05)])
    await asyncio.sleep(0.03)
    assert ad.calls == []  # paused while clients are busy
    clock.t = 100.2  # deadline passes while still busy
    await ex.drain()
    assert outcome(m, "dropped_busy") + outcome(m, "dropped_stale") == 1
    load["inflight"] = 0
    ex.submit([act("a3", h=3)])
    await ex.drain()
    await ex.stop()
    assert ad.calls == ["a3"]


async def test_full_queue_and_errors_counted():
    m = ProxyMetrics(CollectorRegistry())
    ad = FakeAdapter(delay=0.05, ok=False)
    ex = ActionExecutor(ad, m, Clock(), ExecutorLimits(queue_size=1, concurrency=1))
    await ex.start()
    ex.submit([act("a1", h=1)])
    await asyncio.sleep(0.01)  # a1 running, queue empty
    ex.submit([act("a2", h=2), act("a3", h=3)])  # a2 queued, a3 finds the queue full
    await ex.drain()
    await ex.stop()
    assert outcome(m, "dropped_full") == 1 and outcome(m, "error") == 2
