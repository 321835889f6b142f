"""`SimEngine` helpers: block hashes as tokens arrive, vLLM-shaped KV events, decode fast-forward.

Why apart from `engine.py`: the scheduler's rules live there; these are the mechanics around them.
- `_ensure_chain` / `_cache`: a request's block hashes grow with its output (vLLM
  `Request.block_hashes` is extended as tokens are appended) and `BlockPool.cache` hashes its blocks
  once full (vLLM `cache_full_blocks`), emitting `BlockStored` events while the request runs.
- `fast_forward(now, horizon)`: a stretch of decode-only steps in which nothing changes but the
  token counts (no waiting request, no prefill, no finish before the last step, enough free blocks)
  is the same step repeated; run it in one call instead of k `step()` calls. Times are accumulated
  step by step and block allocations / hashing happen at the step that needs them, so the result is
  identical to k `step()` calls (tests/sim/test_engine_vllm.py checks it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.cachemodel.block_hash import ROOT_HASH, block_hash
from proxy.simengine.engine_types import StepResult

if TYPE_CHECKING:
    from proxy.cachemodel.block_pool import BlockPool
    from proxy.simengine.engine_types import EngineConfig, EngineRequest


class EngineKv:
    config: EngineConfig
    pool: BlockPool
    running: list[EngineRequest]
    waiting: Any
    steps: int
    kv_events: list[tuple] | None
    _kv_ctx: EngineRequest | None

    def _release(self, r: EngineRequest, now: float) -> None:
        raise NotImplementedError  # SimEngine's

    # ----------------------------------------------------------------- hashes
    @staticmethod
    def _tokens(r: EngineRequest, a: int, b: int) -> list[int]:
        p = len(r.prompt_ids)
        if b <= p:
            return list(r.prompt_ids[a:b])
        if a >= p:
            return list(r.output_ids[a - p : b - p])
        return list(r.prompt_ids[a:]) + list(r.output_ids[: b - p])

    def _ensure_chain(self, r: EngineRequest, blocks: int) -> None:
        """Hashes for the first `blocks` full blocks of prompt + generated tokens."""
        chain, bs = r.chain, self.config.block_size
        blocks = min(blocks, r.num_tokens // bs)
        while len(chain) < blocks:
            i = len(chain)
            parent = chain[-1] if chain else ROOT_HASH
            chain.append(block_hash(parent, self._tokens(r, i * bs, (i + 1) * bs), r.salt if i == 0 else None))

    def _cache(self, r: EngineRequest, tokens: int, now: float) -> None:
        blocks = tokens // self.config.block_size
        if blocks <= r.hashed_blocks:
            return
        self._ensure_chain(r, blocks)
        ctx = self._kv_ctx
        self._kv_ctx = r if self.kv_events is not None else None
        self.pool.cache(r.req_id, r.chain, now, blocks)
        self._kv_ctx = ctx
        r.hashed_blocks = blocks

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
            r = self._kv_ctx
            index = {h: i for i, h in enumerate(r.chain)}
            bs = self.config.block_size
            run: list[int] = []
            for h in hashes + [None]:  # group consecutive blocks into one event
                i = index.get(h) if h is not None else None
                if run and (i is None or i != index[run[-1]] + 1):
                    first = index[run[0]]
                    parent = r.chain[first - 1] if first > 0 else None
                    tokens = self._tokens(r, first * bs, (first + len(run)) * bs)
                    ev.append(("BlockStored", list(run), parent, tokens, bs, None, "GPU", r.session_id))
                    run = []
                if i is not None:
                    run.append(h)

    # ----------------------------------------------------------------- fast-forward
    def fast_forward(self, now: float, horizon: float = float("inf"), max_steps: int = 1 << 30) -> StepResult | None:
        """Run the coming decode-only steps that start before `horizon` (the next arrival) in one
        call. Returns None when the next step is not a plain decode step (a waiting request that
        could be admitted, a prefill, a host-tier load) or fewer than 2 steps qualify: call
        `step(now)` then."""
        running, cfg, pool = self.running, self.config, self.pool
        if not running or len(running) > cfg.max_num_batched_tokens or now >= horizon:
            return None
        if self.waiting and len(running) < cfg.max_num_seqs:
            return None  # step() would try to admit the head (a full batch leaves it waiting)
        for r in running:
            if r.computed + 1 != r.num_tokens or not r.generated or (r.ready_at is not None and r.ready_at > now):
                return None
        dt = cfg.cost.step_s([], len(running))
        if dt <= 0:
            return None
        k = min(min(len(r.output_ids) - r.generated for r in running), max_steps)
        starts = [now]  # starts[j] = start of step j, accumulated as step() would
        while len(starts) < k and starts[-1] + dt < horizon:
            starts.append(starts[-1] + dt)
        k = len(starts)
        bs = cfg.block_size
        events: list[tuple[int, int, int]] = []  # (step, running index, 0 = allocate | 1 = hash)
        for idx, r in enumerate(running):
            j = pool.held_blocks(r.req_id) * bs - r.computed  # step whose token needs a new block
            while j < k:
                events.append((j, idx, 0))
                j += bs
            j = bs - 1 - r.computed % bs  # step after which a block is full
            while j < k:
                events.append((j, idx, 1))
                j += bs
        events.sort()
        allocs = [e for e in events if e[2] == 0]
        free = pool.num_free()
        if len(allocs) > free:  # the step that would run out is left to step() (preemption)
            k = allocs[free][0]
            events = [e for e in events if e[0] < k]
        if k < 2:
            return None
        for r in running:  # hashes of the blocks the stretch fills (all its tokens are known)
            r.generated += k
            self._ensure_chain(r, (r.computed + k) // bs)
            r.generated -= k
        for j, idx, kind in events:
            r = running[idx]
            if kind == 0:
                pool.extend(r.req_id, (), 1, starts[j], r.priority)
            else:
                self._cache(r, r.computed + j + 1, starts[j])
        end = starts[k - 1] + dt
        emitted = tuple(running)
        finished = []
        for r in emitted:
            r.computed += k
            r.generated += k
            if r.generated >= len(r.output_ids):
                r.finished_at = end
                finished.append(r)
        for r in finished:
            running.remove(r)
            self._release(r, end)
        self.steps += k
        return StepResult(now, end, 0, len(emitted), (), emitted, tuple(finished), steps=k)
