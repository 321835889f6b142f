"""The async driver between the HTTP sim server and the pure scheduler.

Why a separate driver: `SimEngine` is pure (explicit virtual time); the server needs wall-clock
pacing and per-request token streams. One asyncio task runs the step loop: it asks the engine for
the next step, sleeps the step's virtual duration divided by `speed`, then hands the step's tokens
to each request's queue.

Virtual time is driven by the engine while it is busy: back-to-back steps start exactly where the
previous one ended, so Python overhead never inflates the modelled timings (at high `speed` the
wall pacing may lag; the virtual numbers stay the cost model's). While idle, virtual time follows
the wall clock × `speed`, so idle gaps count as on a real engine. A request arriving during a step
gets a virtual arrival interpolated within that step. `speed = 0` never sleeps and lets no wall
time pass (virtual time then only advances by step durations).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from prometheus_client import CollectorRegistry

from proxy.cachemodel.cost_model import CostModel
from proxy.simengine.engine import EngineConfig, EngineRequest, SimEngine, StepResult
from proxy.simengine.engine_metrics import SimEngineMetrics
from proxy.simengine.generation import Output
from proxy.simengine.tokenizer import DEFAULT_VOCAB, SimTokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything `cachescout sim-engine` can set. Defaults: Llama-3.1-8B-class model on one H100."""

    model: str = "sim-llama-3.1-8b"
    block_size: int = 16
    capacity_blocks: int = 28_672
    eviction: str = "lru"  # "lru" (vLLM) | "priority" (SGLang-style)
    retention_seconds: float = 300.0
    max_model_len: int = 32_768  # capped to capacity_blocks × block_size
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    speed: float = 1.0  # wall sleeps = virtual seconds / speed; 0 = no sleeps
    output_tokens: int = 128  # typical answer length (tokens before the end token)
    output_jitter: float = 0.5
    tool_call_share: float = 0.5  # share of tool-offering requests answered by a tool call
    seed: int = 0
    vocab_size: int = DEFAULT_VOCAB
    prompt_tokens_details: bool = True  # vLLM --enable-prompt-tokens-details
    kv_events_endpoint: str | None = None  # e.g. "tcp://127.0.0.1:5557": publish vLLM-style KV events
    cpu_blocks: int = 0  # host (CPU offload) tier in blocks; 0 = none (vLLM without offloading)
    request_log: int = 0  # keep the last N requests for GET /debug/requests (0 = off)
    cost: CostModel = field(default_factory=CostModel)
    scheduling_policy: str = "fcfs"  # "fcfs" | "priority" (vLLM --scheduling-policy) | "sglang"
    long_prefill_token_threshold: int = 0  # vLLM --long-prefill-token-threshold (0 = off)
    priority_preemption_threshold: int = 10  # SGLang --priority-scheduling-preemption-threshold
    low_priority_values_first: bool = False  # SGLang --schedule-low-priority-values-first
    fcfs_priority: str = "refuse"  # vLLM-shaped fcfs + priority != 0: "refuse" (HTTP 400) | "ignore"
    reserve_full_isl: bool = True  # vLLM --scheduler-reserve-full-isl (default on)
    session_radix_cache: bool = False  # SGLang --enable-session-radix-cache (docs/sglang-sessions.md)
    session_close_mode: str = "deref"  # "deref" (SGLang v0.5.17) | "free" (SGLang PR #27058)

    def __post_init__(self) -> None:
        if self.speed < 0:
            raise ValueError("speed must be >= 0")
        if not 0.0 <= self.tool_call_share <= 1.0:
            raise ValueError("tool_call_share must be in [0, 1]")
        if self.output_tokens < 1 or not 0.0 <= self.output_jitter < 1.0:
            raise ValueError("output_tokens must be >= 1 and output_jitter in [0, 1)")
        self.engine_config()  # validates the rest

    @property
    def effective_max_model_len(self) -> int:
        return min(self.max_model_len, self.capacity_blocks * self.block_size)

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            self.block_size,
            self.capacity_blocks,
            self.eviction,
            self.retention_seconds,
            self.max_num_batched_tokens,
            self.max_num_seqs,
            self.cost,
            self.cpu_blocks,
            scheduling_policy=self.scheduling_policy,
            long_prefill_token_threshold=self.long_prefill_token_threshold,
            priority_preemption_threshold=self.priority_preemption_threshold,
            low_priority_values_first=self.low_priority_values_first,
            fcfs_priority=self.fcfs_priority,
            reserve_full_isl=self.reserve_full_isl,
            session_radix_cache=self.session_radix_cache,
            session_close_mode=self.session_close_mode,
        )

    def with_(self, **kw) -> SimConfig:
        return replace(self, **kw)


@dataclass(eq=False)
class Pending:
    """A submitted request as the HTTP layer sees it: the engine state plus a token stream."""

    req: EngineRequest
    output: Output
    queue: asyncio.Queue  # ints: tokens generated so far; None = finished; Exception = failed


class SimService:
    def __init__(self, config: SimConfig, clock: Callable[[], float] | None = None):
        self.config = config
        self.clock = clock or time.monotonic
        self.tokenizer = SimTokenizer(config.vocab_size)
        self.engine = SimEngine(config.engine_config())
        self.registry = CollectorRegistry()
        self.metrics = SimEngineMetrics(self.registry, config.model, self.engine)
        self._v = 0.0  # virtual time at the last sync point
        self._w = self.clock()  # wall time at the last sync point
        self._step_end: float | None = None  # virtual end of the step in flight
        self._chained = False  # a step just ended and more work is queued
        self._ids = itertools.count(1)
        self._pending: dict[int, Pending] = {}
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self.kv_publisher = None
        if config.kv_events_endpoint:
            from proxy.simengine.kv_publisher import KvEventPublisher

            self.engine.enable_kv_events()
            self.kv_publisher = KvEventPublisher(config.kv_events_endpoint)

    def _flush_kv(self) -> None:
        if self.kv_publisher is not None:
            self.kv_publisher.publish(self.engine.drain_kv_events())

    def now(self) -> float:
        """Virtual seconds since the service started."""
        if self._chained:
            return self._v
        elapsed = (self.clock() - self._w) * self.config.speed
        if self._step_end is not None:
            return min(self._v + elapsed, self._step_end)
        return self._v + elapsed

    # ----------------------------------------------------------------- requests
    def submit(
        self,
        prompt_ids: list[int],
        output: Output,
        salt: str | None,
        priority: int,
        session_id: str | None = None,
        radix_session: str | None = None,
    ) -> Pending:
        self._ensure_loop()
        # vLLM's session id (any of its three forms) is echoed on KV events; SGLang's body
        # `session_id` tags the session radix cache, and only with that cache on
        radix = radix_session if self.engine.sessions is not None else None
        req = EngineRequest(
            next(self._ids),
            prompt_ids,
            output.ids,
            salt=salt,
            priority=priority,
            session_id=session_id,
            radix_session=radix,
        )
        self.engine.submit(req, self.now())
        p = Pending(req, output, asyncio.Queue())
        self._pending[req.req_id] = p
        self.metrics.refresh()
        assert self._wake is not None, "_ensure_loop() above created it"
        self._wake.set()
        return p

    def abort(self, p: Pending) -> None:
        if not p.req.done:
            self.engine.abort(p.req, self.now())
            self.metrics.on_finish(p.req, "abort")
            self.metrics.refresh()
            self._flush_kv()
        self._pending.pop(p.req.req_id, None)

    def reset_cache(self) -> bool:
        ok = self.engine.pool.reset()
        self.metrics.refresh()
        self._flush_kv()
        return ok

    def busy(self) -> bool:
        return self.engine.has_work

    # ----------------------------------------------------------------- loop
    def _ensure_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._loop is not loop:
            self._loop = loop
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run(), name="cachescout-sim-engine")

    async def _run(self) -> None:
        assert self._wake is not None
        speed = self.config.speed
        while True:
            if not self.engine.has_work:
                self._chained = False
                self._wake.clear()
                await self._wake.wait()
                continue
            if self._chained:
                start = self._v
            elif self.engine.waiting:  # woke from idle: a real engine would start at the arrival
                start = max(self._v, self.engine.waiting[0].arrival)
            else:
                start = self.now()
            self._chained = False
            self._v, self._w = start, self.clock()
            try:
                res = self.engine.step(start)
            except Exception as exc:  # never leave clients hanging on a scheduler bug
                log.exception("sim engine step failed")
                self._fail_all(exc)
                continue
            if res is None:
                continue
            self._step_end = res.end
            if res.end > start:
                await asyncio.sleep((res.end - start) / speed if speed > 0 else 0)
            else:  # nothing could run (should not happen): back off instead of spinning
                await asyncio.sleep(0.001)
            self._step_end = None
            self._v, self._w = res.end, self.clock()
            self._chained = self.engine.has_work
            self._deliver(res)

    def _fail_all(self, exc: Exception) -> None:
        now = self.now()
        for p in list(self._pending.values()):
            self.engine.abort(p.req, now)
            p.queue.put_nowait(exc)
        self._pending.clear()

    def _deliver(self, res: StepResult) -> None:
        self.metrics.on_step(res)
        self._flush_kv()
        for r in res.emitted:
            p = self._pending.get(r.req_id)
            if p is not None:
                p.queue.put_nowait(r.generated)
        for r in res.finished:
            p = self._pending.pop(r.req_id, None)
            self.metrics.on_finish(r, p.output.finish_reason if p else "stop")
            if p is not None:
                p.queue.put_nowait(None)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping: the loop's error was logged by it
                pass
        if self.kv_publisher is not None:
            self.kv_publisher.close()
            self.kv_publisher = None
