"""The replay's engine: every policy runs on `SimEngine`, advanced in virtual time.

Why one engine: the sim server, the demo and the replay must agree on what a cache policy buys,
so the replay does not keep an engine model of its own. Each trace request becomes an
`EngineRequest` submitted at its arrival time (prompt = its blocks' tokens, its full blocks named by
the trace's chained hashes; output length from the trace); the driver interleaves arrivals with
engine steps, and reads hits (at admission), TTFT (the end of the step that sampled the first
token − arrival), per-turn latency (finish − arrival) and host-tier loads from the engine. Session
timing stays the trace's: arrivals are not moved by the engine's latency.

Policies shape the engine in three ways only:
- an eviction order (`policy.evictor()`): the pool becomes a `PolicyPool` (history, scout-engine,
  pinned Belady); `None` keeps stock LRU (or SGLang-style priority with `policy.eviction`);
- actions (`submit_action`): a touch or warm is a `max_tokens=1` engine request submitted at its
  planned time, competing for the step budget with client requests as a real warmup does; a retain
  is a priority bump that only a priority engine honours;
- pins (`ttl`): blocks held in the pool through `engine.pool.allocate`, as Continuum's engine does.

Decode-only stretches are run in one call (`SimEngine.fast_forward`, exact: same times, blocks
and step counts as stepping), up to the next arrival or policy timer.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from proxy.cachemodel.cost_model import CostModel
from proxy.cachemodel.policy_pool import PolicyPool
from proxy.replay.measure import RunRecorder
from proxy.replay.traces import ReplayRequest
from proxy.simengine.engine import EngineConfig, EngineRequest, SimEngine

if TYPE_CHECKING:
    from proxy.replay.policies import ReplayPolicy

UTILISATION_WINDOW_S = 5.0  # the live proxy's default scrape interval: its utilisation sample


def engine_cost(cost: CostModel, engines: int) -> CostModel:
    """`engines` prefill servers sharing one cache ≈ one engine that computes `engines` times faster."""
    n = max(1, int(engines))
    if n == 1:
        return cost
    return dataclasses.replace(
        cost,
        prefill_token_s=cost.prefill_token_s / n,
        attn_token2_s=cost.attn_token2_s / n,
        decode_seq_s=cost.decode_seq_s / n,
    )


def full_blocks(hashes: Sequence[int], tokens: Sequence[int], block_size: int) -> list[int]:
    """The leading full blocks' hashes (the engine caches only full blocks)."""
    out: list[int] = []
    for h, t in zip(hashes, tokens):
        if t != block_size:
            break
        out.append(h)
    return out


class ActionJob:
    """An action's engine request and what to do when it finishes."""

    __slots__ = ("hashes", "kind", "on_done", "reason", "req", "t", "tokens")

    def __init__(self, req, kind, reason, hashes, tokens, t, on_done):
        self.req = req
        self.kind = kind
        self.reason = reason
        self.hashes = hashes
        self.tokens = tokens
        self.t = t
        self.on_done = on_done


class EngineDriver:
    """One policy's run: the engine, the stream, and the policy's hooks, in virtual time."""

    def __init__(
        self,
        policy: ReplayPolicy,
        requests: Sequence[ReplayRequest],
        capacity: int,
        cost: CostModel,
        engines: int = 1,
        cpu_blocks: int = 0,
        block_size: int = 16,
        config: EngineConfig | None = None,
    ):
        self.policy = policy
        self.requests = requests
        self.n = len(requests)
        self.bs = block_size
        self.cost = cost
        cfg = config or EngineConfig(
            block_size=block_size,
            capacity_blocks=max(1, int(capacity)),
            eviction=getattr(policy, "eviction", "lru"),
            retention_seconds=getattr(policy, "retention_s", 300.0),
            cost=engine_cost(cost, engines),
            cpu_blocks=int(cpu_blocks),
            fcfs_priority="ignore",  # vLLM V1 under fcfs ignores a request's priority (vllm#22997)
            # vLLM --scheduling-policy priority for the lanes (lanes.py); stock fcfs otherwise
            scheduling_policy=getattr(policy, "scheduling", "fcfs"),
            # SGLang --enable-session-radix-cache (sglang_session.py)
            session_radix_cache=bool(getattr(policy, "session_cache", False)),
        )
        self.engine = SimEngine(cfg)
        self.full = [full_blocks(r.block_hashes, r.block_tokens, block_size) for r in requests]
        self.ereqs: list[EngineRequest | None] = [None] * self.n
        self.actions: dict[int, ActionJob] = {}
        self._next_id = self.n
        self._busy: deque[tuple[float, float]] = deque()  # (start, end) of steps that prefilled
        self.clients_inflight = 0
        self.skipped_steps = 0
        self._i = 0  # next request of the stream to arrive (open loop: the trace's order and times)
        self.arrived = 0  # client requests arrived so far

    # ------------------------------------------------------------------ arrivals
    def _peek(self) -> float:
        """When the next client request arrives (inf: none left)."""
        return self.requests[self._i].t if self._i < self.n else float("inf")

    def _pop(self) -> tuple[int, float]:
        i = self._i
        self._i = i + 1
        return i, self.requests[i].t

    def arrival_time(self, k: int) -> float:
        """When the `k`-th client request in arrival order arrives (or arrived); inf: never. Open
        loop: the trace's `k`-th request."""
        return self.requests[k].t if k < self.n else float("inf")

    # ------------------------------------------------------------------ for policies
    def index_of(self, req_id: Any) -> int | None:
        return req_id if isinstance(req_id, int) and 0 <= req_id < self.n else None

    def waiting(self) -> int:
        return len(self.engine.waiting)

    def prefilling(self) -> int:
        """1 while a client prefill runs or waits (live: vLLM's prefill gauge), else 0."""
        n = self.n
        eng = self.engine
        if any(r.req_id < n for r in eng.waiting):
            return 1
        return 1 if any(r.prefilling and r.req_id < n for r in eng.running) else 0

    def decoding(self) -> int:
        """Client requests past their prefill and still generating (live: in flight, first output seen)."""
        n = self.n
        return sum(1 for r in self.engine.running if not r.prefilling and r.req_id < n)

    def utilisation(self, now: float) -> float:
        lo = now - UTILISATION_WINDOW_S
        busy = self._busy
        while busy and busy[0][1] <= lo:
            busy.popleft()
        spent = sum(min(e, now) - max(s, lo) for s, e in busy if s < now)
        return min(1.0, max(0.0, spent / UTILISATION_WINDOW_S))

    def submit_action(
        self,
        kind: str,
        reason: str,
        hashes: Sequence[int],
        tokens: int,
        now: float,
        priority: int = 0,
        on_done: Callable[[bool, float, int, int], None] | None = None,
    ) -> bool:
        """A touch/warm as a `max_tokens=1` request at `now`; a retain as an instant priority bump
        (priority engine only). `on_done(ok, end, cached_tokens, computed_tokens)` when it ends.
        Returns False when the engine cannot run it."""
        rec = self.policy.rec
        tokens = int(tokens)
        if kind == "retain":
            pool = self.engine.pool
            before = pool.match_prefix(hashes)
            if self.engine.config.eviction != "priority":
                rec.unsupported += 1
                return False
            if before:
                pool.access(list(hashes[:before]), now, priority)
            per = _split(tokens, len(hashes))
            rec.action(now, kind, reason, hashes, per, before, before, sum(per[:before]), 0, 0.0)
            if on_done is not None:
                on_done(True, now, sum(per[:before]), 0)
            return True
        bs = self.bs
        full = list(hashes[: max(tokens, 1) // bs])
        if tokens <= 0 or not self.engine.fits(tokens, 1):
            return False
        if not full:  # no full block to keep: nothing a warmup could cache
            return False
        req = EngineRequest(self._next_id, range(tokens), range(1), priority=priority)
        req.hashes = _named(full, tokens // bs, self._next_id)
        self._next_id += 1
        self.engine.submit(req, now)
        self.actions[req.req_id] = ActionJob(req, kind, reason, tuple(hashes), tokens, now, on_done)
        return True

    # ------------------------------------------------------------------ the loop
    def run(self, progress: Callable[[int], None] | None = None) -> None:
        reqs, eng, pol = self.requests, self.engine, self.policy
        evictor = pol.evictor()
        cfg = eng.config
        if evictor is not None:
            eng.pool = PolicyPool(cfg.capacity_blocks, evictor)
        n = self.n
        tick = max(1, n // 50)
        now = reqs[0].t if n else 0.0
        stalls = 0
        while True:
            while self._peek() <= now:
                self._arrival(progress, tick)
            wake = pol.next_wakeup()
            if wake <= now:  # a policy timer (the oracle keeper's just-in-time warms)
                pol.wakeup(now)
                wake = pol.next_wakeup()
            nxt = self._peek()
            if wake < nxt:
                nxt = wake
            if not eng.has_work:
                if nxt == float("inf"):
                    break
                now = nxt
                continue
            res = eng.fast_forward(now, nxt)  # decode-only stretches in one call (exact)
            if res is None:
                res = eng.step(now)
            else:
                self.skipped_steps += res.steps - 1
            assert res is not None
            for r in res.admitted:
                self._admitted(r, res.start)
            if res.end == now and not res.emitted and not self._moved(res):  # nothing could run: wait for an event
                if nxt < float("inf"):
                    now = max(now, nxt)
                    continue
                stalls += 1
                if stalls > 2 or not pol.on_stall(now):
                    raise RuntimeError("the engine cannot make progress (nothing fits)")
                continue
            stalls = 0
            if res.prefill_tokens:
                self._busy.append((res.start, res.end))
            while self._peek() < res.end:  # arrived during the step
                self._arrival(progress, tick)
            for r in res.finished:
                self._finished(r, res.end)
            now = res.end
        pol.on_end(now)
        if progress is not None and n:
            progress(n - 1)

    def _moved(self, res: Any) -> bool:
        """A step that emitted nothing but changed the engine's state (a preemption, an admission):
        step again rather than wait. The open-loop driver waits for the next event (unchanged)."""
        return False

    def _arrival(self, progress: Callable[[int], None] | None, tick: int) -> None:
        i, t = self._pop()
        self._arrive(i, t)
        if progress is not None and self.arrived % tick == 0:
            progress(self.arrived)
        self.arrived += 1

    def _priority(self, i: int, t: float) -> int:
        """A client request's engine priority (0; the session lane sets one: lanes.py)."""
        return 0

    def _arrive(self, i: int, t: float) -> None:
        r = self.requests[i]
        out = max(1, int(r.output_tokens))
        prompt = max(1, int(r.prompt_tokens))
        er = EngineRequest(i, range(prompt), range(out), priority=self._priority(i, t))
        er.hashes = _named(self.full[i], prompt // self.bs, i)
        er.radix_session = self.policy.engine_session(i, r, t)
        if not self.engine.fits(prompt, out):
            raise ValueError(
                f"request {i} needs {self.engine.blocks_needed(prompt, out)} blocks, more than the "
                f"cache's {self.engine.config.capacity_blocks}: raise the capacity"
            )
        self.engine.submit(er, t)
        self.ereqs[i] = er
        self.clients_inflight += 1
        self.policy.on_request(i, r, t)  # after the engine queued it: actions planned now go behind it

    def _admitted(self, er: EngineRequest, now: float) -> None:
        j = er.req_id
        bs = self.bs
        if j < self.n:
            r = self.requests[j]
            gpu = (er.cached_tokens - er.loaded_tokens) // bs
            rec = self.policy.rec
            rec.request(j, er.arrival, r.block_hashes, r.block_tokens, gpu, er.loaded_tokens)
            self.policy.on_admit(j, r, gpu, now)

    def _finished(self, er: EngineRequest, end: float) -> None:
        j = er.req_id
        if j < self.n:
            r = self.requests[j]
            rec = self.policy.rec
            rec.ttft[j] = (er.first_token_at or end) - er.arrival
            rec.turn[j] = end - er.arrival
            self.clients_inflight -= 1
            self.policy.on_response(j, r, int(rec.hit_blocks[j]), end)
            return
        job = self.actions.pop(j)
        cached = er.cached_tokens
        computed = max(job.tokens - cached, 0)
        per = _split(job.tokens, len(job.hashes))
        bs = self.bs
        before = (cached - er.loaded_tokens) // bs
        after = self.engine.pool.match_prefix(job.hashes)
        warmed = max(job.tokens - cached, 0)
        cost = self.cost
        service = cost.chunk_s(cached, max(warmed, 1)) + cost.decode_seq_s
        rec = self.policy.rec
        if er.loaded_tokens:
            rec.action_load_s += cost.load_s(er.loaded_tokens)
        rec.action(job.t, job.kind, job.reason, job.hashes, per, before, after, sum(per[:before]), warmed, service)
        if job.on_done is not None:
            job.on_done(True, end, cached, computed)


def _split(tokens: int, n: int) -> tuple[int, ...]:
    """Per-block tokens of a chain that only carries its total."""
    if n <= 0:
        return ()
    base, rest = divmod(int(tokens), n)
    return tuple(base + (1 if j < rest else 0) for j in range(n))


def _named(full: Sequence[int], n: int, i: int) -> list[int]:
    """`n` block names for a prompt: its full blocks' trace hashes, padded (a trace whose blocks are
    not all full) with names unique to request `i`, which never hit."""
    out = list(full[:n])
    while len(out) < n:
        out.append(-(1 << 40) - (i << 20) - len(out))
    return out


def run_on_engine(
    policy: ReplayPolicy,
    requests: Sequence[ReplayRequest],
    capacity: int,
    cost: CostModel,
    progress: Callable[[int], None] | None = None,
    engines: int = 1,
    cpu_blocks: int = 0,
    block_size: int = 16,
    session_lane: dict | None = None,
) -> RunRecorder:
    """One policy over the stream on `SimEngine` in virtual time (with a host tier of `cpu_blocks`).
    `session_lane` ({"mode", "links", "ageing_s"}): closed-loop session timing with the session
    lane's priorities (`lanes.SessionLaneDriver`)."""
    outputs = np.fromiter((r.output_tokens for r in requests), dtype=np.int64, count=len(requests))
    rec = RunRecorder(cost, outputs, engines)
    from proxy.replay.runner import resume_mask

    rec.resume = resume_mask(requests)
    # a cache smaller than one request's KV (prompt + output) could never run it: the engine gets
    # at least that much (reported as `engine_capacity_blocks`)
    need = max((-(-(max(1, r.prompt_tokens) + max(1, r.output_tokens) - 1) // block_size) for r in requests), default=1)
    rec.engine_capacity = max(int(capacity), need)
    if session_lane is None:
        driver = EngineDriver(policy, requests, rec.engine_capacity, cost, engines, cpu_blocks, block_size)
    else:
        from proxy.replay.lanes import SessionLaneDriver

        driver = SessionLaneDriver(
            policy, requests, rec.engine_capacity, cost, engines, cpu_blocks, block_size, **session_lane
        )
    policy.driver = driver
    policy.setup(requests, capacity, cost, rec)
    driver.run(progress)
    rec.engine_steps = driver.engine.steps
    rec.skipped_steps = driver.skipped_steps
    host = driver.engine.host
    if host is not None:
        rec.host_stats = {
            "capacity_blocks": int(cpu_blocks),
            "lookups": host.lookups,
            "hits": host.hits,
            "stores": host.stores,
            "loads": host.loads,
            "evictions": host.evictions,
        }
    return rec
