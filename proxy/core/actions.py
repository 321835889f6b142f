"""The core's outputs: actions for the executor, per-request observations, and stats.

An Action carries everything the executor and an engine adapter need (payload, deadline) so
neither has to call back into the policy; anchor_id is a short hex id that is safe to log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .action_payload import ActionPayload

TOUCH = "touch"  # anchor cached but near eviction: cheap max_tokens=1 refresh
WARM = "warm"  # anchor evicted and predicted soon: re-prefill off the critical path
RETAIN = "retain"  # priority/TTL hint for engines that honour one
KINDS = (TOUCH, WARM, RETAIN)

# Action reasons: the values (metric label values of cachescout_actions_total{reason} and the yield
# ledger's signals, so their string values are deployed names and stay as they are). Which exist is
# derived from the sources that carry them (core/plan_registry.ACTION_REASONS).
REASON_TRANSITION = "transition"  # top-1 predicted next agent of a live session
# further successors above τ (parallel/branching workflows) AND parents of detected fan-outs: one
# label value for both (deployed), so one yield signal throttles both
REASON_FANOUT = "fanout"
REASON_TOOL_RESUME = "tool_resume"  # session paused on tool calls: keep its context for the resume
# the survival sweep of anchors and paused sessions (and operator pins): protective touches and
# retention; NOT runtime hints (those carry the reason of what they predict). Value "hint": deployed.
REASON_SWEEP = "hint"
# a paused session's predicted next agent's context in it (source successor_contexts, off by
# default): its own signal, so the yield ledger judges it apart from the anchors' transitions
REASON_SUCCESSOR_CONTEXT = "successor_context"
# the deployed values' order (metric exposition, the yield ledger's signals); which reasons exist is
# the registered sources' to say (plan_registry.ACTION_REASONS: these first, a new source's after)
DEPLOYED_ORDER = (REASON_TRANSITION, REASON_FANOUT, REASON_TOOL_RESUME, REASON_SWEEP, REASON_SUCCESSOR_CONTEXT)
# the successor-driven reasons (transition/fanout) and the sweep: actions on agent anchors
ANCHOR_REASONS = (REASON_TRANSITION, REASON_FANOUT, REASON_SWEEP)


@dataclass(frozen=True, slots=True)
class Action:
    kind: str  # "touch" | "warm" | "retain"
    reason: str  # plan_registry.ACTION_REASONS: transition, tool_resume, fanout, hint (the sweep), successor_context
    tenant: str
    anchor_id: str  # short hex id (safe to log; never prompt text)
    block_hashes: tuple[int, ...]
    tokens: int
    payload: ActionPayload  # what rebuilds the prefix: an anchor, or a session's context (+ its assistant turn)
    priority: int  # retention priority for engines that honour one (higher = keep)
    created: float
    deadline: float  # executor drops the action if not started by then
    # the conversation it was planned for (tenant, sid), None for one serving no single session: the
    # runtime gives the action that conversation's engine session id (core/session_tags.py)
    session: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class ObservedRequest:
    request_id: int  # pass back to observe_response
    agent_id: str | None  # None when the request was not learned from
    session_id: str | None
    predicted: bool | None = None  # was this agent the top-1 prediction? None = no prediction made
    resident_tokens: int = 0  # residency shadow's prefix-hit estimate before this request
    acted_reason: str | None = None  # an executed action (within conversion_window_s) prepared
    acted_tokens: int = 0  # ... this request's anchor/context: its reason and tokens
    acted_hash: int | None = None  # ... and the last block hash of the prefix it acted on
    # the tracker's conversation (``session_id`` is the client's own id when it sent one: the run)
    conversation: str | None = None


@dataclass(frozen=True, slots=True)
class PolicyStats:
    predictability: float  # R of the busiest tenant's chain (0..1)
    predictability_by_tenant: dict[str, float] = field(default_factory=dict)
    agents: int = 0
    sessions: int = 0
    transitions: int = 0  # agent->agent steps learned
    predictions: int = 0
    prediction_hits: int = 0
    top1_accuracy: float = 0.0  # hits / predictions (online, before each update)
    gate_open: bool = False
    actions_emitted: dict[str, int] = field(default_factory=dict)  # "kind/reason" -> count
    actions_skipped: dict[str, int] = field(default_factory=dict)  # decisions.SKIP_REASONS -> count
    actions_failed: int = 0
    budget_tokens: float = 0.0  # tokens left in the warmup bucket
    inflight_actions: int = 0
    residency_tokens: int = 0
    residency_capacity_tokens: int = 0
    sessions_seen: int = 0  # sessions (conversations) ever started: each run's new ones included
