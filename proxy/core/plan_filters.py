"""The planner's filters, one piece each, and the verdicts they read (``Look``).

A filter piece (``Filter``) checks a candidate in one or more phases and returns the skip reason
it records, or None: ``first`` runs before the residency verdicts (``FIRST``), ``residency`` after
them (``RESIDENCY``), ``warm`` only for a candidate that would need a warm (tokens missing, not in
the host tier; ``WARM``). A phase's filters run in registry order (plan_registry.PIECES). The
verdicts a filter reads are computed once per candidate and kept on the ``Look`` (one reused
object per tick, so no allocation per candidate): first the cheap ones (``seen`` anchors, whether
the candidate may be retained), then, for those that pass, the residency shadow's and the host
tier's verdicts and the missing tokens. ``Gate`` and ``Deferred`` have no phase: the sources ask
them before they build a candidate (once per tenant per tick; for a successor of a running
request), and so does ``Successors`` of ``Cooldown`` and ``Resident`` (its loop runs for nearly
every request): the same rule, the same piece, switched off by the same name.
"""

from __future__ import annotations

from typing import ClassVar

from .actions import REASON_FANOUT, REASON_SWEEP
from .agents import AgentRegistry, TenantState
from .candidates import Candidate
from .config import PRUNE_SLACK, PolicyConfig
from .plan_piece import FILTER, Piece
from .residency import ResidencyShadow

FIRST = "first"
RESIDENCY = "residency"
WARM = "warm"
PHASES = (FIRST, RESIDENCY, WARM)


class Look:
    """One tick's view of the candidate under consideration: the tick's constants, then the
    candidate's verdicts (set by ``judge``), read by the filters and the pricer."""

    __slots__ = (  # noqa: RUF023 (grouped: the tick's constants, then the candidate's verdicts)
        "cfg", "res", "host", "now", "busy", "seen", "last_acted",
        "retainable", "resident", "full", "near", "h_full", "h_near", "missing", "total",
    )  # fmt: skip

    def __init__(
        self,
        cfg: PolicyConfig,
        res: ResidencyShadow,
        host: ResidencyShadow | None,
        now: float,
        busy: bool,
        last_acted: dict[str, float],
    ) -> None:
        self.cfg, self.res, self.host, self.now, self.busy = cfg, res, host, now, busy
        self.seen: set[str] = set()  # anchors already priced this tick
        self.last_acted = last_acted  # the picker's (plan_picker.Spend), read by Cooldown
        self.retainable = False
        self.resident, self.full, self.near, self.h_full, self.h_near = 0, False, False, False, False
        self.missing = self.total = 0.0

    def first(self, c: Candidate) -> None:
        """The verdict the first filters need: may it be retained (an engine priority)? A session's
        context or fan-out parent serves one session: a priority would outlive it by the engine's
        retention time (retain_sessions opts in)."""
        cfg = self.cfg
        self.retainable = (
            cfg.retain_enabled and c.reason in (REASON_SWEEP, REASON_FANOUT) and (cfg.retain_sessions or not c.context)
        )

    def judge(self, c: Candidate) -> None:
        """The residency verdicts, computed once: the GPU shadow's, the host tier's (only when the
        GPU lacks it), the missing and total tokens."""
        self.resident, self.full, self.near = self.res.verdict(c.hashes)
        if c.context and c.session is not None and self.res.sessions:  # engine truth by session (KV events)
            self.resident, self.full, self.near = self.res.session_verdict(
                c.session, c.hashes, c.block_tokens, (self.resident, self.full, self.near)
            )
        host = self.host
        self.h_full, self.h_near = host.verdict(c.hashes)[1:] if host is not None and not self.full else (False, False)
        self.total = float(sum(c.block_tokens))
        self.missing = 0.0 if self.full else float(sum(c.block_tokens[self.resident :]))


class Filter(Piece):
    """A filter piece: ``phases`` says which of ``first`` / ``residency`` / ``warm`` it runs in."""

    kind = FILTER
    phases: ClassVar[tuple[str, ...]] = ()

    def first(self, c: Candidate, x: Look) -> str | None:
        return None

    def residency(self, c: Candidate, x: Look) -> str | None:
        return None

    def warm(self, c: Candidate, x: Look) -> str | None:
        return None


class Gate(Filter):
    """The tenant's R gate: no prediction-driven candidate while the tenant's workflow is not
    predictable enough (R < ``r_min``, or fewer than ``r_min_transitions`` learned). Asked by the
    sources, one verdict per tenant per tick; the R it read is noted with the tenant's decisions."""

    name = "gate"
    skips = ("gate_closed",)
    settings = ("r_min", "r_min_transitions", "tool_resume_gated")

    def __init__(self) -> None:
        self.r: dict[str, float | None] = {}  # tenant -> its R this tick (None: too few steps)
        self.verdicts: dict[str, bool] = {}  # tenant -> open, this tick

    def begin(self) -> None:
        """A new tick: verdicts are decided afresh."""
        self.r.clear()
        self.verdicts = {}

    @staticmethod
    def r_of(ts: TenantState, cfg: PolicyConfig, now: float | None = None) -> float | None:
        """The gate's R; None while too few transitions are learned (a shut gate)."""
        learner = ts.learner
        return None if learner.steps < cfg.r_min_transitions else learner.predictability(now=now)

    def verdict(self, tenant: str, registry: AgentRegistry, cfg: PolicyConfig, now: float | None) -> bool:
        g = self.verdicts.get(tenant)
        if g is None:  # one verdict per tenant per tick
            r = self.r[tenant] = self.r_of(registry.tenant(tenant), cfg, now)
            g = self.verdicts[tenant] = r is not None and r >= cfg.r_min
        return g


class Deferred(Filter):
    """A prediction made while the request that leads to it still runs waits for the response's
    end when the agent's usual pause leaves time for a warm then (``plan_trigger`` auto): asked by
    ``Successors``, ``SuccessorContexts`` and ``ScoutPolicy.observe_request``."""

    name = "deferred"
    skips = ("deferred",)
    settings = ("plan_trigger", "min_lead_s")

    @staticmethod
    def holds(gap: float | None, need_s: float, cfg: PolicyConfig) -> bool:
        """Defer: the agent's pause median ``gap`` is at least the lead a warm of ``need_s``
        seconds needs (and ``min_lead_s``), so there is time to plan it when the response ends."""
        return gap is not None and gap >= max(cfg.min_lead_s, need_s)


class Duplicate(Filter):
    """One action per anchor per tick. The cooldown cannot see it: ``last_acted`` is written by the
    picker, after every candidate of the tick was filtered, and the sources do not dedupe (two
    sessions predicting one successor, a successor the sweep also ranks), so without this a second
    candidate of the anchor would be priced, charged to the bucket, given a slot and emitted too."""

    name = "duplicate"
    skips = ("duplicate",)
    phases = (FIRST,)

    def first(self, c: Candidate, x: Look) -> str | None:
        return "duplicate" if c.anchor_id in x.seen else None


class Cooldown(Filter):
    """One action per anchor per cool-down."""

    name = "cooldown"
    skips = ("cooldown",)
    phases = (FIRST,)
    settings = ("cooldown_s",)

    @staticmethod
    def cooling(last_acted: dict[str, float], anchor: str, now: float, cooldown_s: float) -> bool:
        last = last_acted.get(anchor)
        return last is not None and now - last < cooldown_s

    def first(self, c: Candidate, x: Look) -> str | None:
        return "cooldown" if self.cooling(x.last_acted, c.anchor_id, x.now, x.cfg.cooldown_s) else None


class HostTier(Filter):
    """Evicted from the GPU but in host memory: bringing it back is a load, timed here."""

    name = "host_tier"
    skips = ("host_not_now",)
    phases = (RESIDENCY,)
    settings = ("host_tier_tokens", "prefetch_window_s")

    def residency(self, c: Candidate, x: Look) -> str | None:
        return "host_not_now" if x.h_full and not host_prefetch(c, x) else None


class Resident(Filter):
    """In the shadow and not near eviction: nothing to do. Remembered (``memo``: anchor -> (shadow
    epoch, inserted-tokens horizon)) so that, until the shadow moves, the anchor is skipped before
    its residency verdicts are computed (``first``) and before ``Successors`` builds it. One piece
    since issue 36: the memo and the verdict ablated identically (docs/policy.md), and switching
    the verdict off left the memo empty; ``resident_memo`` is still accepted as its name."""

    name = "resident"
    skips = ("resident",)
    phases = (FIRST, RESIDENCY)
    aliases = ("resident_memo",)
    settings = ("near_eviction_fraction", "near_eviction_horizon_s")

    def __init__(self) -> None:
        self.memo: dict[str, tuple[int, float]] = {}

    def remembered(self, anchor: str, res: ResidencyShadow) -> bool:
        """Found resident and safe recently, and nothing moved since."""
        memo = self.memo.get(anchor)
        return memo is not None and memo[0] == res.epoch and res.inserted_tokens < memo[1]

    def first(self, c: Candidate, x: Look) -> str | None:
        return "resident" if not x.retainable and self.remembered(c.anchor_id, x.res) else None

    def residency(self, c: Candidate, x: Look) -> str | None:
        if x.full and not x.near and not x.retainable:
            cfg, res, safe = x.cfg, x.res, self.memo
            if len(safe) > PRUNE_SLACK * cfg.max_agents + cfg.max_sessions:
                safe.clear()
            safe[c.anchor_id] = (res.epoch, res.safe_until())
            return "resident"
        return None


class WarmAllowed(Filter):
    """Warming is for predictions: sweeps protect what is there (p_surv is a rank, not a probability
    of demand), touch-only candidates never warm, and no warm queues behind client traffic."""

    name = "warm_allowed"
    skips = ("warm_not_allowed", "warm_busy")
    phases = (WARM,)
    settings = ("warm_max_inflight", "warm_max_waiting")

    def warm(self, c: Candidate, x: Look) -> str | None:
        if c.reason == REASON_SWEEP or not c.warm_ok or x.busy:
            return "warm_busy" if x.busy else "warm_not_allowed"
        return None


def host_prefetch(c: Candidate, x: Look) -> bool:
    """Load a host-resident prefix back now? Predictions (transition, tool resume) are loaded so
    the load lands just before the predicted demand — lead >= load time, and no earlier than
    ``prefetch_window_s`` before that (an early load only crowds the GPU); with no predicted time,
    at once. A sweep candidate only when it nears eviction from host memory too (issue 15)."""
    if c.reason == REASON_SWEEP:
        return x.h_near
    if not c.warm_ok or x.busy:
        return False
    if c.lead is None:
        return True
    need = x.cfg.reload_s(x.missing)
    return need <= c.lead <= need + x.cfg.prefetch_window_s
