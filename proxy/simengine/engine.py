"""The simulated engine's scheduler: continuous batching over the block pool, in virtual time.

Why pure: the HTTP sim server, the in-process tests and the replay call `step(now)` with explicit
virtual time, so the same request sequence gives the same hits and the same timings everywhere.

Model: vLLM v1's `Scheduler.schedule` and `KVCacheManager.allocate_slots` where they decide cache
outcomes (each rule with its source in docs/sim-engine.md, "Scheduler"):
- a waiting request holds no blocks; its prefix hit is looked up when it is scheduled (capped so
  the last token is recomputed), not at arrival;
- each step first serves the running requests in list order (a decode is one token, an unfinished
  prefill a chunk), then admits waiting ones, all from one token budget (`max_num_batched_tokens`,
  `long_prefill_token_threshold` caps one request's chunk);
- a request gets blocks only for the tokens it computes this step (decode blocks as decode
  proceeds); full blocks are hashed as soon as they are scheduled, so others hit on them;
- a waiting request whose blocks do not fit (this step's chunk; and, vLLM's default
  `scheduler_reserve_full_isl`, its whole current sequence) stays waiting and blocks the queue;
- a running request that cannot grow preempts (by recompute) the last running request (`fcfs`) or
  the one with the largest (priority, arrival) (`priority`), possibly itself; the victim frees its
  blocks (they stay cached) and goes back to the waiting queue with nothing computed; no waiting
  request is admitted in a step that preempted;
- the step that computes a request's last known token samples the next one (TTFT = the end of the
  step that samples the first token).
`scheduling_policy="sglang"` orders the queue like SGLang `--enable-priority-scheduling` and lets
a waiting request preempt running ones whose priority is lower by more than the threshold.

Host tier (`cpu_blocks > 0`, vLLM's native CPU offloading; see `host_tier.py`): at admission the
blocks after the GPU hit that the host tier holds are loaded instead of prefilled; the request waits
`CostModel.load_s` before its next chunk (vLLM's WAITING_FOR_REMOTE_KVS). `cached_tokens` counts GPU
hits plus loaded tokens (vLLM's `num_cached_tokens`). A finished request's computed blocks are
written through to the host tier.
"""

from __future__ import annotations

from proxy.cachemodel.block_hash import chain_hashes
from proxy.cachemodel.block_pool import BlockPool
from proxy.cachemodel.host_tier import HostTier
from proxy.cachemodel.session_pool import SessionPool
from proxy.simengine.engine_kv import EngineKv
from proxy.simengine.engine_types import PRIORITY_REFUSED, EngineConfig, EngineRequest, StepResult
from proxy.simengine.request_queue import create_request_queue

__all__ = ["PRIORITY_REFUSED", "EngineConfig", "EngineRequest", "SimEngine", "StepResult"]


class SimEngine(EngineKv):
    """Continuous-batching scheduler over a `BlockPool`. Not thread-safe: one driver calls it."""

    def __init__(self, config: EngineConfig | None = None):
        config = config if config is not None else EngineConfig()
        self.config = config
        self.pool: BlockPool = BlockPool(config.capacity_blocks, config.eviction, config.retention_seconds)
        if config.session_radix_cache:
            self.pool = SessionPool(
                config.capacity_blocks, config.eviction, config.retention_seconds, config.session_close_mode
            )
        self.waiting = create_request_queue(config.scheduling_policy, config.low_priority_values_first)
        self.running: list[EngineRequest] = []
        self.prompt_tokens_queried = 0  # vllm:prefix_cache_queries (tokens)
        self.prompt_tokens_hit = 0  # vllm:prefix_cache_hits (tokens)
        self.host = HostTier(config.cpu_blocks) if config.cpu_blocks > 0 else None
        self.external_queried = 0  # vllm:external_prefix_cache_queries (tokens)
        self.external_hit = 0  # vllm:external_prefix_cache_hits (tokens loaded)
        self.offload = {"CPU_to_GPU": [0, 0.0], "GPU_to_CPU": [0, 0.0]}  # transfer type -> [bytes, seconds]
        self.steps = 0
        self.num_preemptions = 0  # vllm:num_preemptions
        self.kv_events: list[tuple] | None = None  # vLLM-style KV events, when enabled
        self._kv_ctx: EngineRequest | None = None
        self._blocked: tuple[EngineRequest, int, int] | None = None  # (head, pool version, budget) that failed

    # ----------------------------------------------------------------- intake
    def blocks_needed(self, prompt_len: int, output_len: int) -> int:
        kv = prompt_len + max(output_len, 1) - 1
        return -(-kv // self.config.block_size)

    def fits(self, prompt_len: int, output_len: int) -> bool:
        """Whether a request could ever run (the pool is big enough for all its KV)."""
        return self.blocks_needed(prompt_len, output_len) <= self.config.capacity_blocks

    def submit(self, req: EngineRequest, now: float) -> EngineRequest:
        cfg = self.config
        if not req.prompt_ids:
            raise ValueError("empty prompt")
        if not req.output_ids:
            raise ValueError("a request must generate at least one token")
        if not self.fits(req.prompt_len, len(req.output_ids)):
            raise ValueError("request needs more KV blocks than the cache holds")
        if req.priority != 0 and self.refuses_priority:
            raise ValueError(PRIORITY_REFUSED.format(req.priority))
        req.arrival = now
        if not req.hashes:  # a caller (the replay) may name the prompt's full blocks itself
            req.hashes = chain_hashes(req.prompt_ids, cfg.block_size, req.salt)
        req.chain = list(req.hashes)
        pool = self.pool
        if req.radix_session is not None and isinstance(pool, SessionPool):
            req.session_gen = pool.ensure_session(req.radix_session)
        self.waiting.add(req)
        return req

    # ----------------------------------------------------------------- sessions (SGLang)
    @property
    def sessions(self) -> SessionPool | None:
        """The session radix cache, when `session_radix_cache` is on (else None)."""
        pool = self.pool
        return pool if isinstance(pool, SessionPool) else None

    def open_session(self, session_id: str) -> bool:
        """SGLang `/open_session` (optional: a request naming a session opens it)."""
        pool = self.sessions
        if pool is None:
            return False
        pool.open_session(session_id)
        return True

    def close_session(self, session_id: str) -> bool:
        """SGLang `/close_session`: False when the cache is off or the session unknown/closed."""
        pool = self.sessions
        return pool is not None and pool.close_session(session_id)

    @property
    def refuses_priority(self) -> bool:
        """vLLM-shaped engine (LRU eviction) under `fcfs` refuses a non-zero priority."""
        cfg = self.config
        return cfg.scheduling_policy == "fcfs" and cfg.eviction == "lru" and cfg.fcfs_priority == "refuse"

    def abort(self, req: EngineRequest, now: float) -> None:
        """Client went away: drop it from the queue or free its blocks."""
        if req.done:
            return
        req.aborted = True
        req.finished_at = now
        if req in self.waiting:
            self.waiting.remove(req)
        elif req in self.running:
            self.running.remove(req)
            self._release(req, now)

    # ----------------------------------------------------------------- stepping
    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def step(self, now: float) -> StepResult | None:
        """Schedule and run one forward pass starting at `now`; None when idle."""
        if not self.has_work:
            return None
        cfg, running = self.config, self.running
        budget = cfg.max_num_batched_tokens
        thr = cfg.long_prefill_token_threshold
        sched: dict[EngineRequest, int] = {}
        preempted: list[EngineRequest] = []
        loading: list[EngineRequest] = []
        i = 0
        while i < len(running) and budget > 0:  # vLLM: "First, schedule the RUNNING requests."
            r = running[i]
            if r.ready_at is not None and r.ready_at > now:
                loading.append(r)
                i += 1
                continue
            n = r.num_tokens - r.computed
            if 0 < thr < n:
                n = thr
            n = min(n, budget)
            ok = self._grow(r, n, now)
            while not ok:  # preempt until it fits, or it was the victim itself
                if cfg.scheduling_policy == "priority":
                    victim = max(running, key=lambda x: (x.priority, x.arrival))
                    running.remove(victim)
                    if victim in sched:
                        budget += sched.pop(victim)
                        i -= 1
                else:
                    victim = running.pop()
                if victim in loading:
                    loading.remove(victim)
                self._preempt(victim, now)
                preempted.append(victim)
                if victim is r:
                    break
                ok = self._grow(r, n, now)
            if not ok:
                break
            sched[r] = n
            budget -= n
            i += 1
        admitted: list[EngineRequest] = []
        resumed: list[EngineRequest] = []
        if not preempted:  # vLLM: "Next, schedule the WAITING requests." (not after a preemption)
            while self.waiting and budget > 0 and len(running) < cfg.max_num_seqs:
                r = self.waiting.peek()
                m = self._admit(r, now, budget)
                if m is None and cfg.scheduling_policy == "sglang":
                    gained = self._sglang_preempt(r, now, budget, sched, preempted)
                    if gained >= 0:
                        budget += gained
                        m = self._admit(r, now, budget)
                if m is None:
                    break  # head-of-line: the queue waits for this request's blocks
                self.waiting.pop()
                running.append(r)
                (resumed if r.num_preemptions else admitted).append(r)
                if r.ready_at is not None and r.ready_at > now:
                    loading.append(r)  # its KV is on the way from the host tier
                    continue
                sched[r] = m
                budget -= m
        return self._run(now, sched, loading, admitted, resumed, preempted)

    def run_until_idle(self, now: float, max_steps: int = 1_000_000) -> float:
        """Drive every queued request to completion in virtual time; returns the final time."""
        for _ in range(max_steps):
            res = self.step(now)
            if res is None:
                return now
            if res.end == now and not res.emitted and not res.preempted and not res.admitted:
                raise RuntimeError("scheduler cannot make progress")
            now = res.end
        raise RuntimeError("max_steps exceeded")

    # ----------------------------------------------------------------- internals
    def _run(self, now, sched, loading, admitted, resumed, preempted) -> StepResult:
        if not sched:
            # nothing to compute: wait for the first host-tier load to land (or for nothing)
            end = min(r.ready_at for r in loading if r.ready_at is not None) if loading else now
            return StepResult(now, end, 0, 0, tuple(admitted), (), (), tuple(preempted), tuple(resumed))
        chunks: list[tuple[int, int]] = []
        decoding = 0
        items = list(sched.items())
        for r, n in items:
            if n == 1 and r.generated and r.computed + 1 == len(r.prompt_ids) + r.generated:
                decoding += 1
            else:
                chunks.append((r.computed, n))
        end = now + self.config.cost.step_s(chunks, decoding)
        emitted, finished = [], []
        for r, n in items:
            r.computed += n
            if r.computed == len(r.prompt_ids) + r.generated:  # its last known token was computed: sample the next
                r.generated += 1
                emitted.append(r)
                if r.first_token_at is None:
                    r.first_token_at = end
                if r.generated >= len(r.output_ids):
                    r.finished_at = end
                    finished.append(r)
        for r in finished:
            self.running.remove(r)
            self._release(r, end)
        self.steps += 1
        return StepResult(
            now,
            end,
            sum(n for _, n in chunks),
            decoding,
            tuple(admitted),
            tuple(emitted),
            tuple(finished),
            tuple(preempted),
            tuple(resumed),
        )

    def _grow(self, r: EngineRequest, n: int, now: float) -> bool:
        """vLLM allocate_slots for a running request: blocks for `computed + n` tokens, then hash
        the full ones (capped at the tokens known so far)."""
        bs = self.config.block_size
        upto = r.computed + n
        need = -(-upto // bs) - self.pool.held_blocks(r.req_id)
        if need > 0 and not self.pool.extend(r.req_id, (), need, now, r.priority):
            return False
        tokens = len(r.prompt_ids) + r.generated
        if min(upto, tokens) // bs > r.hashed_blocks:
            self._cache(r, min(upto, tokens), now)
        return True

    def _admit(self, r: EngineRequest, now: float, budget: int) -> int | None:
        """Schedule a waiting request: prefix hit (+ host-tier load), then blocks for its first
        chunk. Returns the tokens it computes this step, or None (nothing changed) if they do not fit."""
        cfg, pool, bs = self.config, self.pool, self.config.block_size
        blocked = self._blocked
        if blocked is not None and blocked[0] is r and blocked[1] == pool.version and budget >= blocked[2]:
            return None  # nothing freed or newly cached since it failed, and it would ask for as much
        cap = (r.num_tokens - 1) // bs  # the last token is always recomputed
        self._ensure_chain(r, cap)
        hit = pool.match_prefix(r.chain, cap)
        loaded = 0
        if self.host is not None:
            loaded = self.host.lookup(r.chain, hit, cap)
        computed = (hit + loaded) * bs
        if loaded:
            n = 0  # vLLM: async load, no new work this step (blocks for the loaded tokens only)
        else:
            n = r.num_tokens - computed
            if 0 < cfg.long_prefill_token_threshold < n:
                n = cfg.long_prefill_token_threshold
            n = min(n, budget)
        new_blocks = -(-(computed + n) // bs) - hit
        full_isl = cfg.reserve_full_isl and not pool.fits(r.chain, hit, -(-r.num_tokens // bs) - hit)
        if full_isl or not pool.extend(r.req_id, r.chain[:hit], new_blocks, now, r.priority):
            self._blocked = (r, pool.version, budget)
            return None
        r.hashed_blocks = 0
        if not loaded:
            self._cache(r, min(computed + n, r.num_tokens), now)
        r.computed = computed
        r.ready_at = None
        if loaded:
            self.host.load(r.chain[hit : hit + loaded])  # type: ignore[union-attr]  # loaded > 0 needs a host tier
            tokens, cost = loaded * bs, cfg.cost
            self.offload["CPU_to_GPU"][0] += cost.load_bytes(tokens)
            self.offload["CPU_to_GPU"][1] += cost.transfer_s(tokens)
            r.ready_at = now + cost.load_s(tokens)
        if r.admitted_at is None:  # first scheduling: the request's cache outcome (vLLM stats skip resumes)
            r.admitted_at = now
            r.loaded_tokens = loaded * bs
            r.cached_tokens = computed
            self.prompt_tokens_queried += r.prompt_len
            self.prompt_tokens_hit += hit * bs
            pool.queries += len(r.hashes)
            pool.hits += hit
            if self.host is not None:
                self.external_queried += r.prompt_len - hit * bs
                self.external_hit += loaded * bs
        return n

    def _preempt(self, r: EngineRequest, now: float) -> None:
        """vLLM `_preempt_request`: free its blocks (they stay cached), computed = 0, back to the
        waiting queue's front (a heap push under a priority policy)."""
        self.pool.free(r.req_id, now)
        r.computed = 0
        r.hashed_blocks = 0
        r.ready_at = None
        r.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.prepend(r)

    def _sglang_preempt(self, r, now, budget, sched, preempted) -> int:
        """SGLang `PrefillAdder.preempt_to_schedule`: running requests, least important first
        (then newest), are preemptible while `(r.priority - x.priority) * (-sign)` exceeds the
        threshold; preempt them only if together they free enough. Returns the token budget given
        back (−1 when nothing was preempted)."""
        cfg, bs = self.config, self.config.block_size
        sign = 1 if cfg.low_priority_values_first else -1
        cands = sorted(self.running, key=lambda x: (x.priority * -sign, -x.arrival))
        self._ensure_chain(r, (r.num_tokens - 1) // bs)
        hit = self.pool.match_prefix(r.chain, (r.num_tokens - 1) // bs)
        want = min(r.num_tokens - hit * bs, budget)
        short = -(-(hit * bs + want) // bs) - hit - self.pool.num_free()
        victims = []
        for x in cands:
            if (r.priority - x.priority) * -sign <= cfg.priority_preemption_threshold or short <= 0:
                break
            victims.append(x)
            short -= self.pool.held_blocks(x.req_id)
        if not victims or short > 0:
            return -1
        gained = 0
        for x in victims:
            self.running.remove(x)
            gained += sched.pop(x, 0)
            self._preempt(x, now)
            preempted.append(x)
        return gained  # r stays the queue's head: its victims rank below it

    def _release(self, r: EngineRequest, now: float) -> None:
        bs = self.config.block_size
        self._kv_ctx = r if self.kv_events is not None else None
        self._cache(r, r.computed, now)
        self.pool.free(r.req_id, now)
        self._kv_ctx = None
        pool = self.pool
        if r.radix_session is not None and not r.aborted and isinstance(pool, SessionPool):
            pool.register(r.radix_session, r.session_gen, r.chain[: r.computed // bs])
        if self.host is not None:  # write-through of the blocks this request computed
            chain = r.chain[: r.computed // bs]
            new = self.host.store(chain)
            if new:
                cost = self.config.cost
                self.offload["GPU_to_CPU"][0] += cost.load_bytes(new * bs)
                self.offload["GPU_to_CPU"][1] += cost.transfer_s(new * bs)
