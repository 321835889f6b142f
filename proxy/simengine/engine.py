"""The simulated engine's scheduler: continuous batching over the block pool, in virtual time.

Why pure: the HTTP sim server, the in-process tests and any replay call `step(now)` with explicit
virtual time, so the same request sequence gives the same hits and the same timings everywhere.

Model (vLLM v1 scheduler, simplified):
- requests wait FCFS; each step first gives every running request that has finished prefill one
  decode token, then continues unfinished prefills (chunked), then admits waiting requests while
  the token budget (`max_num_batched_tokens`) and `max_num_seqs` allow;
- admission computes the prefix hit (capped at (prompt-1)//block_size blocks: the last prompt
  token is always recomputed), pins the hit blocks and allocates the rest of the KV the request
  will need (prompt + output − 1 tokens). If the pool cannot supply it the request stays at the
  head of the queue (head-of-line, as vLLM's FCFS does) until running requests free blocks;
- the step that completes a prefill also samples the first token (TTFT = that step's end − arrival);
- when a request finishes, the full blocks of prompt + generated tokens (all but the last token,
  whose KV is never computed) become cached, and its blocks join the free queue deepest first.
Deviations from vLLM (documented in docs/sim-engine.md): decode blocks are reserved at admission
(so there is no preemption), and blocks filled during decode become visible to other requests
only when the request finishes.

Host tier (`cpu_blocks > 0`, vLLM's native CPU offloading; see `host_tier.py`): at admission the
blocks after the GPU hit that the host tier holds are loaded instead of prefilled. The request is
admitted (its GPU slots allocated) but waits `CostModel.load_s` before its first prefill chunk, as a
vLLM request waits in WAITING_FOR_REMOTE_KVS; other requests keep running meanwhile. Its
`cached_tokens` counts GPU hits plus loaded tokens (vLLM's `num_cached_tokens`); `loaded_tokens`
holds the loaded part. When a request finishes, its computed full blocks are written through to
the host tier.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from proxy.cachemodel.block_hash import chain_hashes, extend_chain
from proxy.cachemodel.block_pool import BlockPool
from proxy.cachemodel.cost_model import CostModel
from proxy.cachemodel.host_tier import HostTier


@dataclass(frozen=True, slots=True)
class EngineConfig:
    block_size: int = 16
    capacity_blocks: int = 28_672
    eviction: str = "lru"
    retention_seconds: float = 300.0
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    cost: CostModel = field(default_factory=CostModel)
    cpu_blocks: int = 0  # host (CPU offload) tier size in blocks; 0 = no host tier

    def __post_init__(self) -> None:
        if self.block_size <= 0 or self.capacity_blocks <= 0:
            raise ValueError("block_size and capacity_blocks must be > 0")
        if self.cpu_blocks < 0:
            raise ValueError("cpu_blocks must be >= 0")
        if self.max_num_batched_tokens <= 0 or self.max_num_seqs <= 0:
            raise ValueError("max_num_batched_tokens and max_num_seqs must be > 0")


@dataclass(slots=True, eq=False)
class EngineRequest:
    """One request's state inside the scheduler (mutable; owned by the engine once submitted)."""

    req_id: int
    prompt_ids: Sequence[int]
    output_ids: Sequence[int]  # what it will generate (decided by the caller)
    salt: str | None = None
    priority: int = 0
    arrival: float = 0.0
    hashes: list[int] = field(default_factory=list)
    admitted_at: float | None = None
    cached_tokens: int = 0  # GPU hits + host-tier loads (vLLM num_cached_tokens)
    loaded_tokens: int = 0  # of which loaded from the host tier
    ready_at: float | None = None  # host-tier load completes (no prefill before)
    computed: int = 0  # prompt tokens with KV (cached + prefilled)
    generated: int = 0
    first_token_at: float | None = None
    finished_at: float | None = None
    aborted: bool = False

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prompt_len

    @property
    def done(self) -> bool:
        return self.finished_at is not None


@dataclass(frozen=True, slots=True)
class StepResult:
    start: float
    end: float
    prefill_tokens: int
    decode_rows: int
    admitted: tuple[EngineRequest, ...]
    emitted: tuple[EngineRequest, ...]  # requests that got one new token at `end`
    finished: tuple[EngineRequest, ...]


class SimEngine:
    """Continuous-batching scheduler over a `BlockPool`. Not thread-safe: one driver calls it."""

    def __init__(self, config: EngineConfig = EngineConfig()):
        self.config = config
        self.pool = BlockPool(config.capacity_blocks, config.eviction, config.retention_seconds)
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.prompt_tokens_queried = 0  # vllm:prefix_cache_queries (tokens)
        self.prompt_tokens_hit = 0  # vllm:prefix_cache_hits (tokens)
        self.host = HostTier(config.cpu_blocks) if config.cpu_blocks > 0 else None
        self.external_queried = 0  # vllm:external_prefix_cache_queries (tokens)
        self.external_hit = 0  # vllm:external_prefix_cache_hits (tokens loaded)
        self.offload = {"CPU_to_GPU": [0, 0.0], "GPU_to_CPU": [0, 0.0]}  # transfer type -> [bytes, seconds]
        self.steps = 0
        self.kv_events: list[tuple] | None = None  # vLLM-style KV events, when enabled
        self._kv_ctx: tuple[Sequence[int], Sequence[int]] | None = None

    # ----------------------------------------------------------------- KV events
    def enable_kv_events(self) -> None:
        """Record vLLM-shaped KV events (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`) as
        tuples in `kv_events`; the driver drains them with `drain_kv_events()`."""
        self.kv_events = []
        self.pool.listener = self._on_pool_event

    def drain_kv_events(self) -> list[tuple]:
        if not self.kv_events:
            return []
        out, self.kv_events = self.kv_events, []
        return out

    def _on_pool_event(self, kind: str, hashes: list) -> None:
        ev = self.kv_events
        if ev is None:
            return
        if kind == "cleared":
            ev.append(("AllBlocksCleared",))
        elif kind == "removed":
            if ev and ev[-1][0] == "BlockRemoved":
                ev[-1][1].extend(hashes)
            else:
                ev.append(("BlockRemoved", list(hashes), "GPU"))
        elif kind == "stored" and self._kv_ctx is not None:
            chain, tokens = self._kv_ctx
            index = {h: i for i, h in enumerate(chain)}
            bs = self.config.block_size
            run: list[int] = []
            for h in hashes + [None]:  # group consecutive blocks into one event
                i = index.get(h) if h is not None else None
                if run and (i is None or i != index[run[-1]] + 1):
                    first = index[run[0]]
                    parent = chain[first - 1] if first > 0 else None
                    ev.append(
                        (
                            "BlockStored",
                            list(run),
                            parent,
                            list(tokens[first * bs : (first + len(run)) * bs]),
                            bs,
                            None,
                            "GPU",
                        )
                    )
                    run = []
                if i is not None:
                    run.append(h)

    # ----------------------------------------------------------------- intake
    def blocks_needed(self, prompt_len: int, output_len: int) -> int:
        kv = prompt_len + max(output_len, 1) - 1
        return -(-kv // self.config.block_size)

    def fits(self, prompt_len: int, output_len: int) -> bool:
        """Whether a request could ever be admitted (the pool is big enough for all its KV)."""
        return self.blocks_needed(prompt_len, output_len) <= self.config.capacity_blocks

    def submit(self, req: EngineRequest, now: float) -> EngineRequest:
        if not req.prompt_ids:
            raise ValueError("empty prompt")
        if not req.output_ids:
            raise ValueError("a request must generate at least one token")
        if not self.fits(req.prompt_len, len(req.output_ids)):
            raise ValueError("request needs more KV blocks than the cache holds")
        req.arrival = now
        if not req.hashes:  # a caller (the replay) may name the prompt's full blocks itself
            req.hashes = chain_hashes(req.prompt_ids, self.config.block_size, req.salt)
        self.waiting.append(req)
        return req

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
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        decode: list[EngineRequest] = []
        chunks: list[tuple[EngineRequest, int, int]] = []
        for r in self.running:
            if not r.prefilling and budget > 0:
                decode.append(r)
                budget -= 1
        loading = []
        for r in self.running:
            if r.prefilling and r.ready_at is not None and r.ready_at > now:
                loading.append(r)
            elif r.prefilling and budget > 0:
                n = min(r.prompt_len - r.computed, budget)
                chunks.append((r, r.computed, n))
                budget -= n
        admitted = []
        while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            r = self.waiting[0]
            if not self._admit(r, now):
                break
            self.waiting.popleft()
            self.running.append(r)
            admitted.append(r)
            if r.ready_at is not None and r.ready_at > now:
                loading.append(r)  # its KV is on the way from the host tier
                continue
            n = min(r.prompt_len - r.computed, budget)
            chunks.append((r, r.computed, n))
            budget -= n
        if not decode and not chunks:
            # nothing to compute: wait for the first host-tier load to land (or for nothing)
            # every request in `loading` was put there with a ready_at set (see the checks above)
            end = min(r.ready_at for r in loading if r.ready_at is not None) if loading else now
            return StepResult(now, end, 0, 0, tuple(admitted), (), ())
        end = now + cfg.cost.step_s([(s, n) for _, s, n in chunks], len(decode))
        emitted = list(decode)
        for r, _s, n in chunks:
            r.computed += n
            if not r.prefilling:
                emitted.append(r)
        finished = []
        for r in emitted:
            r.generated += 1
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
            now, end, sum(n for _, _, n in chunks), len(decode), tuple(admitted), tuple(emitted), tuple(finished)
        )

    def run_until_idle(self, now: float, max_steps: int = 1_000_000) -> float:
        """Drive every queued request to completion in virtual time; returns the final time."""
        for _ in range(max_steps):
            res = self.step(now)
            if res is None:
                return now
            if res.end == now and not res.emitted:
                raise RuntimeError("scheduler cannot make progress")
            now = res.end
        raise RuntimeError("max_steps exceeded")

    # ----------------------------------------------------------------- internals
    def _admit(self, r: EngineRequest, now: float) -> bool:
        bs = self.config.block_size
        full = len(r.hashes)
        extra = self.blocks_needed(r.prompt_len, len(r.output_ids)) - full
        self._kv_ctx = (r.hashes, r.prompt_ids) if self.kv_events is not None else None
        hit = self.pool.allocate(
            r.req_id, r.hashes, now, r.priority, extra_blocks=max(extra, 0), max_hit_blocks=(r.prompt_len - 1) // bs
        )
        self._kv_ctx = None
        if hit is None:
            return False
        r.admitted_at = now
        self.prompt_tokens_queried += r.prompt_len
        self.prompt_tokens_hit += hit * bs
        loaded = 0
        if self.host is not None:
            loaded = self.host.lookup(r.hashes, hit, (r.prompt_len - 1) // bs)
            self.external_queried += r.prompt_len - hit * bs  # vLLM: num_tokens - local computed
            if loaded:
                self.host.load(r.hashes[hit : hit + loaded])
                tokens = loaded * bs
                cost = self.config.cost
                self.external_hit += tokens
                self.offload["CPU_to_GPU"][0] += cost.load_bytes(tokens)
                self.offload["CPU_to_GPU"][1] += cost.transfer_s(tokens)
                r.ready_at = now + cost.load_s(tokens)
        r.loaded_tokens = loaded * bs
        r.cached_tokens = (hit + loaded) * bs
        r.computed = r.cached_tokens
        return True

    def _release(self, r: EngineRequest, now: float) -> None:
        bs = self.config.block_size
        kv_tokens = r.computed + max(r.generated - 1, 0) if not r.prefilling else r.computed
        tail: list[int] = []
        if kv_tokens // bs > len(r.hashes):
            seq = list(r.prompt_ids) + list(r.output_ids[: max(r.generated - 1, 0)])
            chain = extend_chain(r.hashes, seq[:kv_tokens], bs, r.salt)
            tail = chain[len(r.hashes) :]
            if self.kv_events is not None:
                self._kv_ctx = (chain, seq)
        self.pool.free(r.req_id, now, tail_hashes=tail)
        self._kv_ctx = None
        if self.host is not None:  # write-through of the blocks this request computed
            chain = (list(r.hashes) + tail)[: kv_tokens // bs]
            new = self.host.store(chain)
            if new:
                cost = self.config.cost
                self.offload["GPU_to_CPU"][0] += cost.load_bytes(new * bs)
                self.offload["GPU_to_CPU"][1] += cost.transfer_s(new * bs)
