"""Every tunable constant of the policy core, with its default and why.

One frozen dataclass so the live proxy (pydantic settings), the replay evaluator and the tests
all build the same object; nothing in proxy/core reads the environment itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace

# Bounds of the core's bookkeeping maps, as multiples of the caps below (max_agents, max_sessions),
# named so that every module uses one figure and the figure says why:
PENDING_PER_SESSION = 4  # requests awaiting their response, per live session on average: parallel
# tool calls and fan-out siblings rarely exceed it; beyond it the oldest are dropped (not learned from)
PRUNE_SLACK = 4  # maps keyed by agent/anchor (last-acted times, safe-anchor memos, action
# attributions) are pruned of expired entries only once they hold this many times their cap: one
# O(n) prune per O(n) inserts keeps them amortised O(1) and their memory a constant multiple of the cap

# The planner's pieces are switched off by name (PolicyConfig.disabled_pieces, for ablations); the
# names are the registered pieces' own (core/plan_registry.py: NAMES and ALIASES), checked when the
# planner is built (plan_registry.resolve), because the pieces import this module and not back.

# Pieces and settings removed because they earned nothing on the headroom grid (issue 26 item 4,
# docs/policy.md "Ablation on the headroom grid"). Deployed configurations may still name them: a
# removed setting in the overrides, or a removed piece in disabled_pieces, is dropped (not an error);
# the runtime logs one warning naming it (runtime/policy_config.py, removed_names below).
REMOVED_PIECES = ("warm_too_early", "warm_too_big")
REMOVED_SETTINGS = ("warm_max_cache_share", "warm_lifetime_share", "session_gated")

# The engine's waiting queue gates actions at three points, from strictest to loosest:
#   warm_max_waiting (planner: no Warm above it; 0 = a warm never queues in front of a request),
#   max_engine_waiting (planner: no action at all above it),
#   the executor's limit (runtime/executor.ExecutorLimits.max_waiting: an action already planned
#   waits, and is dropped at its deadline, while the queue is above it).
# The live proxy sets the last two from one setting (CACHESCOUT_ACTION_MAX_WAITING, see
# runtime/policy_config.py), so the planner never emits what the executor would hold back.


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    # --- canonical view -------------------------------------------------------------------
    block_chars: int = 64  # chars per canonical block (~16 tokens at 4 chars/token)
    chars_per_token: float = 4.0  # token estimate for text blocks
    # --- agent identity -------------------------------------------------------------------
    max_agents: int = 256  # registry cap over all tenants; least valuable evicted
    prefix_index_max_bytes: int = 16 << 20  # prefix index (agent discovery) memory cap; cold leaves evicted
    min_sources_below_agent: int = 3  # sources a branch point below an existing agent needs to
    # become an agent of its own (2 when no agent is above it)
    first_sight_window: int = 64  # a system prompt followed by more of the prompt is an agent on
    # first sight, dropped if not seen again within this many requests
    # --- sessions -------------------------------------------------------------------------
    max_sessions: int = 4096  # live session cap; oldest evicted first
    session_ttl_s: float = 1800.0  # a session idle this long is forgotten
    infer_max_lookback: int = 512  # blocks scanned backwards when inferring a session's parent
    # --- transitions ----------------------------------------------------------------------
    epsilon: float = 0.1  # ε: additive smoothing in P_ij = (C_ij+ε)/Σ_k(C_ik+ε)
    decay_half_life: float = 200.0  # counts of a row halve after this many transitions out of it
    top_k: int = 2  # successors considered per prediction
    # --- predictability gate --------------------------------------------------------------
    r_min: float = 0.3  # R_min: transition/fanout actions only when R >= this
    r_min_transitions: int = 20  # the gate stays shut until this many transitions were learned
    r_refresh_steps: int = 256  # cached R recomputed this often (more often while young)
    # --- survival scoring -----------------------------------------------------------------
    tau: float = 0.1  # τ: BFS only follows edges with P_ij >= τ
    max_hops: int = 3  # K: p_surv = 1 - min(E, K)/K
    delta: float = 0.1  # δ: floor in (p_surv+δ)(e^(-λ·age)+δ)
    age_lambda: float = 0.005  # λ per second of anchor age (half-life ~139 s)
    continuation_horizon_s: float = 60.0  # "resumes within" horizon for paused sessions
    tool_resume_prior: float = 0.9  # resume probability after finish_reason=tool_calls w/o history
    continuation_prior: float = 0.3  # same after other finishes
    continuation_min_samples: int = 3  # gaps needed before the observed ones replace the prior
    gap_samples: int = 16  # inter-request gaps kept per agent (and per kind)
    # --- residency shadow -----------------------------------------------------------------
    residency_capacity_tokens: int = 0  # engine prefix-cache capacity; 0 = unknown (assume resident)
    near_eviction_fraction: float = 0.25  # "near eviction": within the oldest quarter of the LRU
    near_eviction_horizon_s: float = 0.0  # >0: or within what traffic inserts in this many seconds
    residency_stride: int = 0  # track every Nth block; 0 = auto (256 tokens / block size); 1 = exact
    residency_stride_tokens: int = 256  # auto stride target
    residency_max_entries: int = 160_000  # memory bound on tracked blocks (~250 B each under churn: ~40 MB;
    # at the auto stride of 256 tokens that covers 41M tokens, more than any one engine). Kept under
    # 174,762 (2^19 / 3): a dict that churns at n entries resizes to the power of two above 3n, so at
    # 200k its two dicts took 2^20 slots (21 MB each), at 160k 2^19 (10.5 MB each).
    # --- planner --------------------------------------------------------------------------
    warmup_tokens_per_s: float = 0.0  # token-bucket refill for warm/touch cost; 0 = auto:
    # warmup_share x prefill_tokens_per_s (a fixed number that
    # exceeds the engine's own prefill rate swamps it)
    warmup_burst_tokens: float = 0.0  # bucket size; 0 = auto: max(2 s of budget, 1 s of prefill)
    warmup_share: float = 0.15  # auto budget's share of the engine's prefill rate
    touch_cost_tokens: int = 16  # budget charged for a touch (one recomputed block + decode)
    max_concurrent: int = 2  # actions emitted but not yet reported back
    max_actions_per_tick: int = 4  # actions per plan() call
    max_engine_waiting: int = 2  # no actions while the engine queue is longer than this (live:
    # CACHESCOUT_ACTION_MAX_WAITING, also the executor's limit; see the note above the class)
    warm_max_waiting: int = 0  # no Warm while the engine queue is longer than this (a warm
    # is prefill work queued in front of real requests)
    warm_top_k: int = 1  # only the top this-many successors may be warmed; the rest
    # (fanout) are only touched
    warm_max_inflight: int = 0  # >0: no Warm while more client requests than this are in flight
    plan_trigger: str = "auto"  # when a session's successors are planned: "response" (its
    # response ends: just before the demand), "request", "both"
    # (touch-only while the request runs, warm at the end), or
    # "auto" (at the end when the agent's usual pause leaves time
    # for a warm, else while the request runs)
    cooldown_s: float = 0.5  # never act on the same anchor twice within this
    action_ttl_s: float = 2.0  # deadline = created + ttl (executor drops stale actions)
    min_lead_s: float = 0.05  # plan_trigger auto: a successor is deferred to its predecessor's
    # response only when the agent's usual pause is at least this (and the warm's time), else it is
    # planned while the request runs
    prefill_tokens_per_s: float = 5000.0  # the engine's prefill rate: "can a warm finish before the
    # demand", and the auto warm budget (the live side measures
    # it; the replay passes its cost model's)
    # the price of bringing an evicted anchor back (issue 15): with a host-memory tier (vLLM CPU
    # offloading, LMCache) it is a load, without one a recompute at prefill_tokens_per_s
    reload_tokens_per_s: float = 0.0  # host tier -> GPU load rate in tokens/s; 0 = no host tier
    reload_latency_s: float = 0.0  # fixed cost of one load (the engine's async load step)
    host_tier_tokens: int = 0  # host tier size; >0: a second residency shadow models it (what is
    # evicted from the GPU but still in host memory comes back as a load)
    prefetch_window_s: float = 1.0  # tool-resume prefetch with a host tier: start the load at most this
    # long before it must start to land before the predicted resume
    sweep_interval_s: float = 1.0  # survival-ranked sweep over all anchors at most this often
    sweep_top_n: int = 8  # anchors (and paused sessions) examined per sweep
    sweep_sessions: int = 64  # most recent sessions a sweep checks for continuation (0 = off)
    tool_resume_min_p: float = 0.5  # continuation probability needed for a tool_resume action
    tool_resume_gated: bool = False  # also require R >= R_min for tool_resume (a fact, not a guess)
    # a tool pause is offered again at these quantiles of its agent's tool pauses (less the context's
    # prefill time): the context kept when the pause started may be evicted before the tool returns
    resume_wake_quantiles: tuple[float, ...] = (0.25, 0.5, 0.75)
    # ... and this much earlier again than the context's prefill time: the live runtime plans on a
    # 0.25 s tick (policy_plan_interval) and a warm has its own round trip (tokenize, queue); with
    # no margin a warm woken for a 2 s pause went out after the resume (docs/replay.md)
    resume_wake_margin_s: float = 0.5
    successor_contexts: int = 0  # per session, the last context of this many of its other agents is
    # kept, and when the session stops (not on a tool call) the predicted next agent's context there
    # is a candidate (source successor_contexts, issue 21); 0 = off (judged on the grid: docs/replay.md)
    fanout_enabled: bool = True  # protect the shared parent of concurrent requests / n > 1
    retain_enabled: bool = False  # emit Retain hints (only for engines that honour them)
    retain_priority_scale: int = 100  # Action.priority = round(p_surv * scale)
    retain_sessions: bool = False  # also give session contexts' actions an engine priority, and
    # Retain fan-out parents (not only agent anchors): off, because an engine keeps a retained block's
    # priority for its retention time (SGLang/Dynamo: 300 s) and
    # contexts of finished sessions then crowd out live histories
    conversion_window_s: float = 300.0  # an executed action counts toward a request this long
    disabled_pieces: tuple[str, ...] = ()  # planner pieces switched off by name (plan_registry.NAMES
    # and their aliases), for ablations only; a comma list is accepted ("tool_resume,cooldown", e.g.
    # --scout-set); removed ones (REMOVED_PIECES) are dropped; an unknown one raises when the
    # planner is built (plan_registry.resolve)
    # parameters of the planner's pieces that have their own (plan_piece.Piece.Params), by piece name:
    # {"warm_too_late": {"slack": 1.0}}; naming an opt-in piece here switches it on (JSON string or
    # mapping; docs/pieces.md)
    piece_params: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    lineage_resume: bool = False  # text views (no chat view, no marked anchor): keep their lineages
    # and offer a paused one's resume (source lineage_resume, issue 23 item 5); off: a wash on the
    # synthetic text traces (docs/replay.md "Text traces")
    # --- snapshot -------------------------------------------------------------------------
    snapshot_max_bytes: int = 2 * 1024 * 1024  # state file budget: max_agents agents and a full
    # transition matrix fit (~1.7 MB at 256 agents); dump keeps the
    # most valuable agents that fit, restore refuses larger documents
    # --- memory budget (hardening, issue 13) ------------------------------------------------
    session_max_bytes: int = 64 * 1024 * 1024  # sessions' hash chains + kept payloads, estimated;
    # the least recently active sessions are dropped first
    fanout_max_bytes: int = 16 * 1024 * 1024  # parked fan-out parents between two plan ticks
    agents_max_bytes: int = 16 * 1024 * 1024  # agents' anchors (hashes, block tokens, replay payload),
    # estimated; over it (or over prefix_index_max_bytes with only agent nodes left to evict) the
    # least valuable agents are evicted (issue 22)

    def __post_init__(self) -> None:
        off: object = self.disabled_pieces
        if isinstance(off, str):  # a --scout-set / policy_overrides value: a comma list
            off = tuple(p.strip() for p in off.split(",") if p.strip())
        if not isinstance(off, tuple):
            off = tuple(off) if isinstance(off, (list, set, frozenset)) else (str(off),)
        params: object = self.piece_params
        if isinstance(params, str):  # a --scout-set / policy_overrides value: JSON
            params = json.loads(params) if params.strip() else {}
        if not isinstance(params, Mapping) or not all(isinstance(v, Mapping) for v in params.values()):
            raise ValueError(f"piece_params must map piece names to parameter objects, got {params!r}")
        if params is not self.piece_params:
            object.__setattr__(self, "piece_params", params)
        if any(p in REMOVED_PIECES for p in off):
            off = tuple(p for p in off if p not in REMOVED_PIECES)
        if off is not self.disabled_pieces:
            object.__setattr__(self, "disabled_pieces", off)

    def with_overrides(self, **overrides: object) -> PolicyConfig:
        """Copy with some fields replaced; unknown names raise (typos must not pass silently),
        removed ones (REMOVED_SETTINGS) are dropped (the caller warns: removed_names)."""
        if any(k in REMOVED_SETTINGS for k in overrides):
            overrides = {k: v for k, v in overrides.items() if k not in REMOVED_SETTINGS}
        names = {f.name for f in fields(self)}
        unknown = set(overrides) - names
        if unknown:
            raise TypeError(f"unknown PolicyConfig fields: {sorted(unknown)}")
        # names are checked above; values pass through unchecked, as before (hence the untyped call)
        copy: Callable[..., PolicyConfig] = replace
        return copy(self, **overrides)

    def reload_s(self, tokens: float) -> float:
        """Seconds to bring `tokens` evicted tokens back: a load where the engine has a host tier,
        a recompute where not. The planner's lead-time test (the warm must land before the demand)."""
        if tokens <= 0:
            return 0.0
        if self.reload_tokens_per_s > 0:
            return self.reload_latency_s + tokens / self.reload_tokens_per_s
        return tokens / self.prefill_tokens_per_s

    def reload_cost_tokens(self, tokens: float) -> float:
        """A warm's charge to the warmup budget, in prefill-token equivalents (engine seconds ×
        prefill rate): `tokens` without a host tier, far less with one."""
        if self.reload_tokens_per_s <= 0:
            return float(tokens)
        return self.reload_s(tokens) * self.prefill_tokens_per_s

    def warm_budget(self) -> tuple[float, float]:
        """(refill tokens/s, bucket size) after resolving the auto (0) settings."""
        rate = self.warmup_tokens_per_s or self.warmup_share * self.prefill_tokens_per_s
        burst = self.warmup_burst_tokens or max(2.0 * rate, self.prefill_tokens_per_s)
        return float(rate), float(burst)


def removed_names(overrides: Mapping[str, object]) -> list[str]:
    """The removed settings (REMOVED_SETTINGS) and pieces (REMOVED_PIECES, in a disabled_pieces
    value: a comma list or a sequence) that `overrides` still names, for the caller's one warning."""
    out = [k for k in overrides if k in REMOVED_SETTINGS]
    off = overrides.get("disabled_pieces")
    pieces = off.split(",") if isinstance(off, str) else off if isinstance(off, (list, tuple, set, frozenset)) else ()
    out += [f"disabled_pieces={p}" for p in (str(p).strip() for p in pieces) if p in REMOVED_PIECES]
    return out
