"""What the live proxy sees of its executor, modelled in the replay's virtual time.

Why: the replay must predict the live proxy. Live, an action goes through the executor (bounded
queue, `concurrency` workers, dedupe, yield-to-traffic, stale drop; `runtime/executor.py`) and then
waits in the engine's queue with client requests; the planner hears back when the engine answered.
`ReplayExecutor` applies the same rules to the same `ExecutorLimits`, at event granularity: a
queued action starts at the first replay event at which a worker is free and the engine is not
busy, runs as an engine request (`engine_run.EngineDriver.submit_action`), and is reported back
when the engine finishes it (`complete`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from proxy.core.actions import Action
from proxy.runtime.executor import ExecutorLimits, action_key


class ReplayExecutor:
    """The live executor's rules over virtual time. `run(action, now)` hands an action to the
    simulated engine and returns whether it was accepted; the engine's completion calls
    `complete(action, ok, end, computed_tokens)`, which tells the core (`report`)."""

    def __init__(
        self, limits: ExecutorLimits, run: Callable[[Action, float], bool], report: Callable[..., None]
    ) -> None:
        self.limits = limits
        self.run = run
        self.report = report
        self.queue: deque[Action] = deque()
        self.keys: set[tuple] = set()  # queued or running (dedupe)
        self.active = 0  # running on the engine
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
        """Start queued actions while a worker is free (finished ones come back via `complete`)."""
        busy = inflight > self.limits.max_inflight or waiting > self.limits.max_waiting
        queue = self.queue
        while queue and self.active < self.limits.concurrency:
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
            self.active += 1
            if self.run(a, now):
                self.stats["ok"] += 1
            else:
                self.active -= 1
                self.stats["unsupported"] += 1
                self.keys.discard(action_key(a))
                self.report(a, False, now, 0)

    def complete(self, a: Action, ok: bool, end: float, computed: int) -> None:
        self.active -= 1
        self.keys.discard(action_key(a))
        self.report(a, ok, end, computed)
