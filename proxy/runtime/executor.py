"""Background executor: turns planner actions into engine requests without hurting client traffic.

Why a bounded queue with its own workers: the observer runs on the request path and must return in
microseconds, so it only *enqueues*. Workers then apply three rules before spending engine time:
- stale-drop: an action not started by its deadline predicts a moment that has passed;
- yield-to-traffic: while client requests in flight (or the engine's waiting queue) exceed the
  configured limits, actions wait, and are dropped as `dropped_busy` if that lasts past the deadline —
  a warmup must never queue in front of a real request;
- dedupe: the same prefix queued twice is sent once.
Every action ends in exactly one `cachescout_actions_total{kind,reason,outcome}` increment, so the
dashboards can compute conversion per reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.engines.base import WarmResult

if TYPE_CHECKING:
    from proxy.core.actions import Action
    from proxy.engines.base import EngineAdapter
    from proxy.observability.metrics import ProxyMetrics
    from proxy.runtime.prefill import PrefillRate

log = logging.getLogger("cachescout.executor")

BUSY_POLL_S = 0.01


@dataclass(frozen=True, slots=True)
class ExecutorLimits:
    queue_size: int = 256
    concurrency: int = 2
    max_inflight: int = 64  # client requests in flight through the proxy
    max_waiting: int = 4  # engine's waiting queue (from the scraper)


ActionKey = tuple[str, str, int, int | None]  # (tenant, anchor, prefix blocks, last block hash)


def action_key(action: Action) -> ActionKey:
    hashes = action.block_hashes
    return (action.tenant, action.anchor_id, len(hashes), hashes[-1] if hashes else None)


class ActionExecutor:
    """Consumes actions from a bounded queue; `submit` is safe to call from synchronous hooks."""

    def __init__(
        self,
        adapter: EngineAdapter,
        metrics: ProxyMetrics | None,
        clock: Callable[[], float],
        limits: ExecutorLimits = ExecutorLimits(),
        load: Callable[[], tuple[int, int]] = lambda: (0, 0),
        on_result: Callable[[Action, WarmResult, float], None] | None = None,
    ) -> None:
        self.adapter = adapter
        self.metrics = metrics
        self.clock = clock
        self.limits = limits
        self.load = load
        self.on_result = on_result
        self._queue: asyncio.Queue[Action] | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._pending: dict[ActionKey, Action] = {}
        self._running: dict[ActionKey, Action] = {}
        self.recent: deque[dict[str, object]] = deque(maxlen=64)
        self.paused = False
        self.sending = 0  # actions inside adapter.warm (the engine may already count them)
        self.prefill: PrefillRate | None = None  # PrefillRate: ok warmups' computed tokens / duration
        self.stats = {
            "submitted": 0,
            "deduped": 0,
            "ok": 0,
            "error": 0,
            "unsupported": 0,
            "dropped_stale": 0,
            "dropped_busy": 0,
            "dropped_full": 0,
            "warm_prompt_tokens": 0,
            "warm_cached_tokens": 0,
            "warm_computed_tokens": 0,
        }

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._queue is not None:
            return
        self._queue = asyncio.Queue(maxsize=self.limits.queue_size)
        self._workers = [
            asyncio.create_task(self._worker(i), name=f"cachescout-action-{i}") for i in range(self.limits.concurrency)
        ]

    async def stop(self) -> None:
        for t in self._workers:
            t.cancel()
        for t in self._workers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._workers = []
        self._queue = None

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait until the queue is empty and no action runs (tests and the demo use this)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while (self._pending or self._running) and loop.time() < end:
            await asyncio.sleep(0.005)

    # -- submission (sync, request path) -------------------------------------------------------
    def submit(self, actions: Iterable[Action]) -> int:
        """Queue actions; returns how many were queued. Never blocks, never raises on a full queue."""
        queued = 0
        for action in actions:
            self.stats["submitted"] += 1
            key = action_key(action)
            if key in self._pending or key in self._running:
                self.stats["deduped"] += 1  # the twin action carries it; the core still hears back
                self._report(action, WarmResult(ok=False, error="deduped"))
                continue
            if self._queue is None:
                self._finish(action, "dropped_full", None)
                continue
            try:
                self._queue.put_nowait(action)
            except asyncio.QueueFull:
                self._finish(action, "dropped_full", None)
                continue
            self._pending[key] = action
            queued += 1
        self._depth()
        return queued

    def pending(self) -> list[dict[str, object]]:
        now = self.clock()
        items = list(self._running.values()) + list(self._pending.values())
        return [
            {
                "kind": a.kind,
                "reason": a.reason,
                "anchor": a.anchor_id,
                "tokens": a.tokens,
                "running": action_key(a) in self._running,
                "age_s": round(now - a.created, 3),
                "deadline_in_s": round(a.deadline - now, 3),
            }
            for a in items
        ]

    # -- workers ----------------------------------------------------------------------------------
    async def quiesce(self, timeout: float = 5.0) -> bool:
        """Start nothing new (queued and later actions end as `dropped_busy`) and wait until no
        warmup is on the wire: lets tests and the demo read engine counters that no warmup is still
        changing. True when quiet within `timeout`."""
        self.paused = True
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self.sending and loop.time() < end:
            await asyncio.sleep(0.005)
        return self.sending == 0

    def _busy(self) -> bool:
        if self.paused:
            return True
        inflight, waiting = self.load()
        return inflight > self.limits.max_inflight or waiting > self.limits.max_waiting

    async def _worker(self, idx: int) -> None:
        assert self._queue is not None
        queue = self._queue
        while True:
            action = await queue.get()
            key = action_key(action)
            self._pending.pop(key, None)
            self._running[key] = action
            self._depth()
            try:
                await self._run_one(action)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("action failed unexpectedly")
                self._finish(action, "error", WarmResult(ok=False, error=type(exc).__name__))
            finally:
                self._running.pop(key, None)
                queue.task_done()
                self._depth()

    async def _run_one(self, action: Action) -> None:
        while True:
            if self.clock() > action.deadline:
                self._finish(action, "dropped_stale", None)
                return
            if not self._busy():
                break
            if self.paused or self.clock() + BUSY_POLL_S > action.deadline:
                self._finish(action, "dropped_busy", None)
                return
            await asyncio.sleep(BUSY_POLL_S)
        alone = self.sending == 0 and self.load()[0] == 0
        self.sending += 1
        t0 = self.clock()
        try:
            result = await self.adapter.warm(action)
        finally:
            self.sending -= 1
        result = dataclasses.replace(result, sent_at=t0)  # the yield ledger asks what ran alongside
        if result.ok and self.prefill is not None:
            self.prefill.add_request(result.computed_tokens, self.clock() - t0, alone=alone)
        outcome = "ok" if result.ok else ("unsupported" if result.unsupported else "error")
        self._finish(action, outcome, result)

    def _finish(self, action: Action, outcome: str, result: WarmResult | None) -> None:
        self.stats[outcome] = self.stats.get(outcome, 0) + 1
        if self.metrics is not None:
            self.metrics.actions_total.labels(kind=action.kind, reason=action.reason, outcome=outcome).inc()
        if result is not None and result.ok:
            self.stats["warm_prompt_tokens"] += result.prompt_tokens
            self.stats["warm_cached_tokens"] += result.cached_tokens
            self.stats["warm_computed_tokens"] += result.computed_tokens
            if self.metrics is not None:
                self.metrics.warmup_tokens_total.inc(result.prompt_tokens)
        now = self.clock()
        self.recent.append(
            {
                "kind": action.kind,
                "reason": action.reason,
                "anchor": action.anchor_id,
                "tokens": action.tokens,
                "outcome": outcome,
                "at": round(now, 3),
                "cached": result.cached_tokens if result else None,
                "error": result.error if result else None,
            }
        )
        self._report(action, result if result is not None else WarmResult(ok=False, error=outcome))

    def _report(self, action: Action, result: WarmResult) -> None:
        if self.on_result is not None:
            try:
                self.on_result(action, result, self.clock())
            except Exception:
                log.exception("on_result hook failed")

    def _depth(self) -> None:
        if self.metrics is not None:
            self.metrics.action_queue_depth.set(len(self._pending))
