"""Engine /metrics poller on an async timer.

Why scrape at all when usage already carries `cached_tokens`: the engine's own counters include
warmups and traffic that bypasses the proxy, and its waiting queue is the signal the executor
yields to. The hit ratio gauge is computed over the last scrape window (delta hits / delta queries)
so it shows the current regime, not the average since the engine started; engines that only
report a ratio (SGLang) are passed through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from proxy.engines.base import EngineSnapshot

if TYPE_CHECKING:
    from proxy.engines.base import EngineAdapter
    from proxy.observability.metrics import ProxyMetrics

log = logging.getLogger("cachescout.scraper")


class EngineScraper:
    def __init__(
        self,
        adapter: EngineAdapter,
        metrics: ProxyMetrics | None,
        interval_s: float = 5.0,
        on_snapshot: Callable[[EngineSnapshot], None] | None = None,
    ) -> None:
        self.adapter = adapter
        self.metrics = metrics
        self.interval_s = interval_s
        self.on_snapshot = on_snapshot
        self.latest: EngineSnapshot | None = None
        self.window_hit_ratio: float | None = None
        self.scrapes = 0
        self.failures = 0
        self._prev: EngineSnapshot | None = None
        self._before: EngineSnapshot | None = None  # the scrape before `latest`
        self._task: asyncio.Task | None = None
        # the proxy's own requests on the engine (clients in flight + actions sending), set by LiveRuntime:
        # sampled around each scrape so that `external` counts only what the proxy did not send
        self.own: Callable[[], int] = lambda: 0
        self._external: tuple[int, int] = (0, 0)  # (latest, the scrape before)

    @property
    def waiting(self) -> int:
        """The engine's waiting queue as the executor and the core see it: the smaller of the last two
        scrapes. The gauge is a point sample; one scrape that catches a request (or the proxy's own
        warmup) between arrival and admission must not stop warmups for a whole scrape interval,
        while a queue that persists across two scrapes is real load."""
        if self.latest is None:
            return 0
        now = int(self.latest.waiting or 0)
        if self._before is None:
            return now
        return min(now, int(self._before.waiting or 0))

    @property
    def external(self) -> int:
        """Requests the engine runs or queues that neither this proxy's clients nor its actions
        account for (another client on the same engine): the engine's own load, not inferred from
        the proxy's traffic. The smaller of the last two scrapes, like `waiting`."""
        return min(self._external)

    def _update_external(self, snap: EngineSnapshot, own_before: int) -> None:
        if snap.running is None and snap.waiting is None:
            return
        own = max(own_before, self._own())  # a request started or ended during the scrape is ours
        engine = int(snap.running or 0) + int(snap.waiting or 0)
        self._external = (max(0, engine - own), self._external[0])

    def _own(self) -> int:
        try:
            return int(self.own())
        except Exception:  # noqa: BLE001 - never let bookkeeping break a scrape
            return 0

    async def scrape_once(self) -> EngineSnapshot | None:
        own_before = self._own()
        try:
            snap = await self.adapter.scrape()
        except Exception as exc:  # noqa: BLE001 - a scrape must never take the proxy down
            self.failures += 1
            log.debug("scrape failed: %s", exc)
            return None
        if snap is None:
            self.failures += 1
            return None
        self.scrapes += 1
        self._update_ratio(snap)
        self._update_external(snap, own_before)
        self._before = self.latest
        self._prev, self.latest = snap, snap
        if self.on_snapshot is not None:
            try:
                self.on_snapshot(snap)
            except Exception:
                log.exception("on_snapshot hook failed")
        return snap

    def _update_ratio(self, snap: EngineSnapshot) -> None:
        ratio: float | None = None
        prev = self._prev
        if snap.prefix_queries is not None and snap.prefix_hits is not None:
            if (
                prev is not None
                and prev.prefix_queries is not None
                and prev.prefix_hits is not None
                and snap.prefix_queries >= prev.prefix_queries
            ):
                dq = snap.prefix_queries - prev.prefix_queries
                if dq > 0:
                    ratio = (snap.prefix_hits - prev.prefix_hits) / dq
            elif snap.prefix_queries > 0:  # first scrape (or counters reset): since engine start
                ratio = snap.prefix_hits / snap.prefix_queries
        elif snap.hit_rate is not None:
            ratio = snap.hit_rate
        if ratio is not None:
            self.window_hit_ratio = max(0.0, min(1.0, ratio))
            if self.metrics is not None:
                self.metrics.engine_prefix_cache_hit_ratio.set(self.window_hit_ratio)

    async def _loop(self) -> None:
        while True:
            await self.scrape_once()
            await asyncio.sleep(self.interval_s)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="cachescout-scraper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    def info(self) -> dict:
        snap = self.latest
        return {
            "interval_s": self.interval_s,
            "scrapes": self.scrapes,
            "failures": self.failures,
            "window_hit_ratio": self.window_hit_ratio,
            "latest": None
            if snap is None
            else {
                "prefix_queries": snap.prefix_queries,
                "prefix_hits": snap.prefix_hits,
                "hit_rate": snap.hit_rate,
                "kv_usage": snap.kv_usage,
                "running": snap.running,
                "waiting": snap.waiting,
            },
            "waiting_used": self.waiting,
            "external_used": self.external,
        }
