"""The planner's per-candidate filters, in order, and the verdicts they read (``Look``).

A filter is ``(Candidate, Look) -> skip reason | None``. The verdicts a filter reads are computed
once per candidate and kept on the ``Look`` (one reused object per tick, so no allocation per
candidate): first the cheap ones (``seen`` anchors, the cooldown, the resident memo, whether the
candidate may be retained), then, for those that pass, the residency shadow's and the host tier's
verdicts and the missing tokens. Why this shape: every rule is a named function checked once,
recorded under its own stage, and switched off by name (``PolicyConfig.disabled_pieces``).

``FIRST`` run before the residency verdicts, ``RESIDENCY`` after them, and ``WARM`` only for a
candidate that would need a warm (tokens missing, not in the host tier); a filter of the last two
lists records the missing tokens it compared (``Look.missing``), ``resident`` excepted.
"""

from __future__ import annotations

from collections.abc import Callable

from .actions import REASON_FANOUT, REASON_SWEEP
from .candidates import Candidate
from .config import PRUNE_SLACK, PolicyConfig
from .residency import ResidencyShadow


class Look:
    """One tick's view of the candidate under consideration: the tick's constants, then the
    candidate's verdicts (set by ``judge``), read by the filters and the pricer."""

    __slots__ = (  # noqa: RUF023 (grouped: the tick's constants, then the candidate's verdicts)
        "cfg", "res", "host", "now", "busy", "seen", "last_acted", "safe",
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
        safe: dict[str, tuple[int, float]],
    ) -> None:
        self.cfg, self.res, self.host, self.now, self.busy = cfg, res, host, now, busy
        self.seen: set[str] = set()  # anchors already priced this tick
        self.last_acted, self.safe = last_acted, safe
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


# --- before the residency verdicts ------------------------------------------------------------------
def duplicate(c: Candidate, x: Look) -> str | None:
    """One action per anchor per tick. The cooldown cannot see it: ``last_acted`` is written by the
    picker, after every candidate of the tick was filtered, and the sources do not dedupe (two
    sessions predicting one successor, a successor the sweep also ranks), so without this a second
    candidate of the anchor would be priced, charged to the bucket, given a slot and emitted too."""
    return "duplicate" if c.anchor_id in x.seen else None


def cooldown(c: Candidate, x: Look) -> str | None:
    """One action per anchor per cool-down."""
    last = x.last_acted.get(c.anchor_id)
    return "cooldown" if last is not None and x.now - last < x.cfg.cooldown_s else None


def resident_memo(c: Candidate, x: Look) -> str | None:
    """Found resident and safe recently, and nothing moved since (the memo ``resident`` writes)."""
    memo = x.safe.get(c.anchor_id)
    res = x.res
    if memo is not None and memo[0] == res.epoch and res.inserted_tokens < memo[1] and not x.retainable:
        return "resident"
    return None


# --- after them -----------------------------------------------------------------------------------
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


def host_tier(c: Candidate, x: Look) -> str | None:
    """Evicted from the GPU but in host memory: bringing it back is a load, timed here."""
    return "host_not_now" if x.h_full and not host_prefetch(c, x) else None


def resident(c: Candidate, x: Look) -> str | None:
    """In the shadow and not near eviction: nothing to do (remembered in the memo)."""
    if x.full and not x.near and not x.retainable:
        cfg, res, safe = x.cfg, x.res, x.safe
        if len(safe) > PRUNE_SLACK * cfg.max_agents + cfg.max_sessions:
            safe.clear()
        safe[c.anchor_id] = (res.epoch, res.safe_until())
        return "resident"
    return None


# --- only for a candidate that would need a warm (tokens missing, not in the host tier) ---------------
def warm_allowed(c: Candidate, x: Look) -> str | None:
    """Warming is for predictions: sweeps protect what is there (p_surv is a rank, not a probability
    of demand), touch-only candidates never warm, and no warm queues behind client traffic."""
    if c.reason == REASON_SWEEP or not c.warm_ok or x.busy:
        return "warm_busy" if x.busy else "warm_not_allowed"
    return None


Filter = Callable[[Candidate, Look], "str | None"]
# The registry: (piece name, filter), one line each, in the order they run.
FIRST: tuple[tuple[str, Filter], ...] = (
    ("duplicate", duplicate),
    ("cooldown", cooldown),
    ("resident_memo", resident_memo),
)
RESIDENCY: tuple[tuple[str, Filter], ...] = (("host_tier", host_tier), ("resident", resident))
WARM: tuple[tuple[str, Filter], ...] = (  # only when tokens are missing and not in the host tier
    ("warm_allowed", warm_allowed),
)
# filters that are not per-candidate functions: the R gate (sources ask it, once per tenant per
# tick) and the deferral of successors of a running request (Successors; ScoutPolicy.observe_request)
OTHER_FILTERS = ("gate", "deferred")
FILTER_NAMES = (*(n for n, _ in FIRST), *(n for n, _ in RESIDENCY), *(n for n, _ in WARM), *OTHER_FILTERS)


def enabled(registry: tuple[tuple[str, Filter], ...], off: frozenset[str]) -> tuple[Filter, ...]:
    return tuple(f for name, f in registry if name not in off)
