"""The simulated engine's data: configuration, per-request state, step results.

Why apart from `engine.py`: the scheduler module stays about rules; these are its public records
(re-exported by `proxy.simengine.engine`, where callers import them from).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from proxy.cachemodel.cost_model import CostModel
from proxy.simengine.request_queue import POLICIES

PRIORITY_REFUSED = "Got priority {} but Priority scheduling is not enabled."  # vLLM's text (see docs)


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
    scheduling_policy: str = "fcfs"  # "fcfs" | "priority" (vLLM) | "sglang" (SGLang priority scheduling)
    long_prefill_token_threshold: int = 0  # vLLM: cap on one request's tokens per step; 0 = off
    priority_preemption_threshold: int = 10  # SGLang --priority-scheduling-preemption-threshold
    low_priority_values_first: bool = False  # SGLang --schedule-low-priority-values-first
    fcfs_priority: str = "refuse"  # vLLM-shaped fcfs + non-zero priority: "refuse" (400) | "ignore"
    reserve_full_isl: bool = True  # vLLM scheduler_reserve_full_isl: admit only if the whole sequence fits
    session_radix_cache: bool = False  # SGLang --enable-session-radix-cache (cachemodel/session_pool.py)
    session_close_mode: str = "deref"  # "deref" (SGLang v0.5.17 unified cache) | "free" (PR #27058)

    def __post_init__(self) -> None:
        if self.block_size <= 0 or self.capacity_blocks <= 0:
            raise ValueError("block_size and capacity_blocks must be > 0")
        if self.cpu_blocks < 0:
            raise ValueError("cpu_blocks must be >= 0")
        if self.max_num_batched_tokens <= 0 or self.max_num_seqs <= 0:
            raise ValueError("max_num_batched_tokens and max_num_seqs must be > 0")
        if self.scheduling_policy not in POLICIES:
            raise ValueError(f"scheduling_policy must be one of {POLICIES}, got {self.scheduling_policy!r}")
        if self.fcfs_priority not in ("refuse", "ignore") or self.long_prefill_token_threshold < 0:
            raise ValueError("fcfs_priority must be refuse|ignore and long_prefill_token_threshold >= 0")
        if self.session_close_mode not in ("deref", "free"):
            raise ValueError("session_close_mode must be deref|free")


@dataclass(slots=True, eq=False)
class EngineRequest:
    """One request's state inside the scheduler (mutable; owned by the engine once submitted)."""

    req_id: int
    prompt_ids: Sequence[int]
    output_ids: Sequence[int]  # what it will generate (decided by the caller)
    salt: str | None = None
    priority: int = 0
    arrival: float = 0.0
    session_id: str | None = None  # vLLM's request session id: echoed on its BlockStored events
    hashes: list[int] = field(default_factory=list)  # the prompt's full blocks
    admitted_at: float | None = None  # first time scheduled
    cached_tokens: int = 0  # GPU hits + host-tier loads at first scheduling (vLLM num_cached_tokens)
    loaded_tokens: int = 0  # of which loaded from the host tier
    ready_at: float | None = None  # host-tier load completes (no prefill before)
    computed: int = 0  # tokens (prompt + generated) whose KV is computed (vLLM num_computed_tokens)
    generated: int = 0
    first_token_at: float | None = None
    finished_at: float | None = None
    aborted: bool = False
    num_preemptions: int = 0
    chain: list[int] = field(default_factory=list)  # hashes of every full block so far (prompt + output)
    hashed_blocks: int = 0  # leading blocks of its current allocation already hashed (cache_full_blocks)
    radix_session: str | None = None  # SGLang's body `session_id` (session radix cache only)
    session_gen: int = 0  # the session's incarnation when it was submitted

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt + tokens generated so far (vLLM `Request.num_tokens`)."""
        return len(self.prompt_ids) + self.generated

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
    admitted: tuple[EngineRequest, ...]  # scheduled for the first time
    emitted: tuple[EngineRequest, ...]  # requests that got `steps` new tokens by `end`
    finished: tuple[EngineRequest, ...]
    preempted: tuple[EngineRequest, ...] = ()
    resumed: tuple[EngineRequest, ...] = ()  # preempted earlier, scheduled again
    steps: int = 1  # > 1 only from `fast_forward`
