"""What the live proxy sees of its engine and executor, modelled in the replay's virtual time.

Why: the replay must predict the live proxy. Live, an action goes through the executor (bounded
queue, `concurrency` workers, dedupe, yield-to-traffic, stale drop; `runtime/executor.py`) and then
waits in the engine's FIFO with client prefill; the planner hears back when the engine answered.
`ReplayExecutor` applies the same rules to the same `ExecutorLimits`, at event granularity: a
queued action starts at the first replay event at which a worker is free and the engine is not
busy, and is reported back when its job in the `EngineQueue` ends.
`EngineQueue` is the engine's prefill FIFO as the planner would read it live: how many requests
wait (vLLM `num_requests_waiting`), whether a client prefill is running, and the share of the last
`UTILISATION_WINDOW_S` spent prefilling (live: the scraped prefill-seconds counter's rate).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

from proxy.core.actions import Action
from proxy.runtime.executor import ExecutorLimits, action_key

UTILISATION_WINDOW_S = 5.0  # the live proxy's default scrape interval: its utilisation sample


class EngineQueue:
    """The simulated engine's prefill FIFO over `engines` servers (the TTFT model's), kept online.
    Jobs arrive in time order, so their start times are non-decreasing and deques suffice."""

    def __init__(self, engines: int = 1) -> None:
        self.engines = max(1, int(engines))
        self.servers = [0.0] * self.engines  # heap of the servers' free times
        self.starts: deque[float] = deque()
        self.client_until = 0.0  # end of the last client prefill job
        self._jobs: deque[tuple[float, float]] = deque()  # (start, end) of recent jobs

    def push(self, now: float, service_s: float, client: bool = True) -> float:
        """Queue a job; returns its end time."""
        free = self.servers[0]
        start = now if now > free else free
        end = start + service_s
        heapq.heapreplace(self.servers, end)
        if start > now:
            self.starts.append(start)
        if client and end > self.client_until:
            self.client_until = end
        self._jobs.append((start, end))
        return end

    def waiting(self, now: float) -> int:
        starts = self.starts
        while starts and starts[0] <= now:
            starts.popleft()
        return len(starts)

    def prefilling(self, now: float) -> int:
        """1 while a client prefill is running or queued, else 0."""
        return 1 if self.client_until > now else 0

    def utilisation(self, now: float) -> float:
        lo = now - UTILISATION_WINDOW_S
        jobs = self._jobs
        while jobs and jobs[0][1] <= lo:
            jobs.popleft()
        busy = sum(min(e, now) - max(s, lo) for s, e in jobs if s < now)
        return min(1.0, max(0.0, busy / (UTILISATION_WINDOW_S * self.engines)))


class ReplayExecutor:
    """The live executor's rules over virtual time. `run(action, now)` executes an action on the
    simulated engine and returns (ok, end time, tokens it prefilled);
    `report(action, ok, now, computed_tokens)` tells the core."""

    def __init__(
        self,
        limits: ExecutorLimits,
        run: Callable[[Action, float], tuple[bool, float, int]],
        report: Callable[..., None],
    ) -> None:
        self.limits = limits
        self.run = run
        self.report = report
        self.queue: deque[Action] = deque()
        self.keys: set[tuple] = set()  # queued or running (dedupe)
        self.running: list[tuple[float, int, Action, bool, int]] = []  # heap: (end, seq, action, ok, computed)
        self._seq = 0
        self.stats = {
            "submitted": 0,
            "deduped": 0,
            "ok": 0,
            "unsupported": 0,
            "dropped_stale": 0,
            "dropped_busy": 0,
            "dropped_full": 0,
        }

    def submit(self, actions: list[Action], now: float) -> None:
        for a in actions:
            self.stats["submitted"] += 1
            key = action_key(a)
            if key in self.keys:
                self.stats["deduped"] += 1
                self.report(a, False, now)
                continue
            if len(self.queue) >= self.limits.queue_size:
                self.stats["dropped_full"] += 1
                self.report(a, False, now)
                continue
            self.keys.add(key)
            self.queue.append(a)

    def pump(self, now: float, inflight: int, waiting: int) -> None:
        """Report finished actions, then start queued ones while a worker is free."""
        running = self.running
        while running and running[0][0] <= now:
            end, _, a, ok, computed = heapq.heappop(running)
            self.keys.discard(action_key(a))
            self.report(a, ok, end, computed)
        busy = inflight > self.limits.max_inflight or waiting > self.limits.max_waiting
        queue = self.queue
        while queue and len(running) < self.limits.concurrency:
            a = queue[0]
            if now > a.deadline:
                queue.popleft()
                self.keys.discard(action_key(a))
                self.stats["dropped_busy" if busy else "dropped_stale"] += 1
                self.report(a, False, now)
                continue
            if busy:
                break  # yield to traffic; retried at the next event
            queue.popleft()
            ok, end, computed = self.run(a, now)
            self.stats["ok" if ok else "unsupported"] += 1
            self._seq += 1
            heapq.heappush(running, (end, self._seq, a, ok, computed))

    def flush(self) -> None:
        """End of the stream: report everything still running."""
        while self.running:
            end, _, a, ok, computed = heapq.heappop(self.running)
            self.report(a, ok, end, computed)
