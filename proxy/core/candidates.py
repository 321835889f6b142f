"""The planner's pipeline vocabulary: what a candidate is, what one tick knows, and the protocols
its pieces are written against (docs/policy.md "The planner pipeline").

    sources (plan_sources.py) -> filters (plan_filters.py) -> pricer (economics.assess)
        -> picker (plan_picker.py) -> vetoes (the runtime's action_gate)

A source appends ``Candidate``s to ``Tick.out``; every piece that drops one records the stage
that dropped it (``decisions.SKIP_REASONS``) through ``Recorder``. Why a separate module: the
pieces import this one and never the planner, so the planner can import them all (no cycle).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .action_payload import ActionPayload
from .actions import Action
from .agents import Agent, AgentRegistry
from .config import PolicyConfig
from .decisions import ACTED, DecisionLog
from .economics import Verdict
from .hints import HintCandidate
from .lineages import LineageBook
from .residency import ResidencyShadow
from .sessions import SessionTracker

# a parked fan-out parent: (agent, parent hashes, their block tokens, payload)
FanoutParent = tuple[Agent, tuple[int, ...], tuple[int, ...], ActionPayload]


@dataclass(slots=True, kw_only=True)
class Candidate:
    """One prefix worth considering this tick; keyword-only so a source says what each field is."""

    score: float
    reason: str  # the action reason it will carry (actions.REASONS); the decision's ``source``
    tenant: str
    anchor_id: str
    hashes: tuple[int, ...]
    block_tokens: tuple[int, ...]
    payload: ActionPayload
    prob: float
    lead: float | None  # seconds until the predicted demand; None = unknown (not imminent)
    warm_ok: bool = True  # False: only touch (planned while the session's request still runs)
    context: bool = False  # a session's whole context (not an agent anchor)
    session: tuple[str, str] | None = None  # the session it was planned for (re-planned if it waits)
    soon: bool = False  # the demand follows a request still running (its pause is too short)


class RuntimeHints(Protocol):
    """What the planner needs of the runtime hints driver (core.hint_actions.HintDriver)."""

    def candidates(self, now: float) -> list[HintCandidate]: ...

    def note(self, actions: Sequence[Action]) -> None: ...


class Recorder:
    """Counting and noting decisions (mixed into ``Planner``, which owns this state)."""

    skipped: dict[str, int]  # Planner.skipped (SKIP_REASONS)
    decisions: DecisionLog
    _r: dict[str, float | None]  # tenant -> gate R this tick

    def _drop(
        self, stage: str, now: float, source: str = "", anchor: str = "", tenant: str = "", prob: float | None = None
    ) -> None:
        """Count a skip (decisions.SKIP_REASONS) and note it in the ring; no source = a whole tick."""
        self.skipped[stage] += 1
        self.decisions.note(now, stage, source, anchor, tenant, "", self._r.get(tenant) if source else None, prob)

    def _skip(
        self,
        stage: str,
        c: Candidate,
        now: float,
        v: Verdict | None = None,
        missing: float | None = None,
        kind: str = "",
    ) -> None:
        """A candidate's decision (a skip, counted, or ACTED), with the figures its stage compared."""
        if stage != ACTED:
            self.skipped[stage] += 1
        r = self._r.get(c.tenant)
        if v is None:
            self.decisions.note(now, stage, c.reason, c.anchor_id, c.tenant, kind, r, c.prob, missing, c.lead)
        else:
            self.decisions.note(
                now,
                stage,
                c.reason,
                c.anchor_id,
                c.tenant,
                kind or v.kind,
                r,
                c.prob,
                missing,
                c.lead,
                v.saving,
                v.cost,
                v.kept,
            )


class PlanState(Protocol):
    """The planner's state a source reads (``Planner`` is one)."""

    cfg: PolicyConfig
    registry: AgentRegistry
    sessions: SessionTracker
    residency: ResidencyShadow
    dirty: dict[tuple[str, str], None]
    fanout: dict[tuple[str, str], FanoutParent]
    hints: RuntimeHints | None
    lineages: LineageBook | None  # text views' lineages (lineages.py), when the policy keeps them
    last_acted: dict[str, float]
    _safe: dict[str, tuple[int, float]]

    def _drop(
        self, stage: str, now: float, source: str = "", anchor: str = "", tenant: str = "", prob: float | None = None
    ) -> None: ...

    def _gate(self, tenant: str, gates: dict[str, bool]) -> bool: ...


@dataclass(slots=True)
class Tick:
    """One plan() call as its sources see it: the time, the R gates decided so far (one verdict per
    tenant per tick), the pieces switched off, whether the sweep is due, and the output list."""

    p: PlanState
    now: float
    off: frozenset[str]
    sweep_due: bool
    gates: dict[str, bool]
    out: list[Candidate]
    calm: bool = True  # no client request prefills in the engine, nor waits there (outside the slack lane)

    def gate(self, tenant: str) -> bool:
        """The tenant's R gate, decided once per tick (``Planner._gate``)."""
        return self.p._gate(tenant, self.gates)


class CandidateSource(Protocol):
    """A source of candidates once per tick: appends to ``tick.out`` and records what it drops."""

    name: str  # its piece name (PolicyConfig.disabled_pieces)

    def collect(self, tick: Tick) -> None: ...
