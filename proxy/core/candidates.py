"""The planner's pipeline vocabulary: what a candidate is and who records decisions
(docs/pieces.md; what one tick offers the sources is plan_tick.Tick).

    sources (plan_sources.py ...) -> filters (plan_filters.py) -> pricer (economics.assess)
        -> picker (plan_picker.py) -> vetoes (plan_picker.ActionGate)

A source appends ``Candidate``s to ``Tick.out``; every piece that drops one records its skip reason
and its own name through the ``Recorder``. Why a separate module: the pieces import this one and
never the planner, so the planner can import them all (no cycle).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .action_payload import ActionPayload
from .actions import Action
from .agents import Agent
from .decisions import ACTED, DecisionLog
from .economics import Verdict
from .hints import HintCandidate

# a parked fan-out parent: (agent, parent hashes, their block tokens, payload)
FanoutParent = tuple[Agent, tuple[int, ...], tuple[int, ...], ActionPayload]


@dataclass(slots=True, kw_only=True)
class Candidate:
    """One prefix worth considering this tick; keyword-only so a source says what each field is."""

    score: float
    reason: str  # the action reason it will carry (a source's ``reasons``; cachescout_actions_total{reason})
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
    source: str = ""  # the source piece that offered it (its registry name; the decision ring's ``source``)


class RuntimeHints(Protocol):
    """What the planner needs of the runtime hints driver (core.hint_actions.HintDriver)."""

    def candidates(self, now: float) -> list[HintCandidate]: ...

    def note(self, actions: Sequence[Action]) -> None: ...


class Recorder:
    """Counts and notes every decision: a collaborator the planner owns and hands to its pieces
    (through ``Tick.drop``) and to the picker, never a mixin reading planner attributes.

    ``by_piece`` counts by (deciding piece, skip reason) (``cachescout_planner_skips_total{piece,
    reason}``), pre-initialised from the registry's pairs; ``skipped`` sums it by skip reason
    (``PolicyStats.actions_skipped``, the replay's ``top_skips``); ``r`` is the gate's R per tenant
    this tick (plan_filters.Gate.r), noted with a candidate's decision. The ring stores the deciding
    piece; its stage is looked up when the ring is read (``stage_of``)."""

    __slots__ = ("by_piece", "decisions", "r", "skip_reasons")

    def __init__(
        self,
        skip_reasons: tuple[str, ...],
        pairs: tuple[tuple[str, str], ...],
        stage_of: dict[str, str],
        r: dict[str, float | None],
    ) -> None:
        self.skip_reasons = skip_reasons
        self.by_piece: dict[tuple[str, str], int] = dict.fromkeys(pairs, 0)
        self.decisions = DecisionLog(stage_of=stage_of)  # the recent ones, with the figures compared
        self.r = r

    @property
    def skipped(self) -> dict[str, int]:
        """Skips by reason (every registered skip reason, zeros included): a new dict each call, summed
        from the per-piece counts (`by_piece`), so a caller that watches it over time reads it again."""
        out = dict.fromkeys(self.skip_reasons, 0)
        for (_, skip), n in self.by_piece.items():
            out[skip] = out.get(skip, 0) + n
        return out

    def drop(
        self,
        by: str,
        skip: str,
        now: float,
        source: str = "",
        reason: str = "",
        anchor: str = "",
        tenant: str = "",
        prob: float | None = None,
    ) -> None:
        """A skip before a candidate exists (or of a whole tick: no ``reason``), decided by piece
        ``by`` for source piece ``source`` (an action of reason ``reason``)."""
        key = (by, skip)
        self.by_piece[key] = self.by_piece.get(key, 0) + 1
        r = self.r.get(tenant) if reason else None
        self.decisions.note(now, skip, by, source, reason, anchor, tenant, "", r, prob)

    def decide(
        self,
        by: str,
        outcome: str,
        c: Candidate,
        now: float,
        v: Verdict | None = None,
        missing: float | None = None,
        kind: str = "",
    ) -> None:
        """A candidate's decision (a skip, counted, or ACTED), with the figures its stage compared."""
        if outcome != ACTED:
            key = (by, outcome)
            self.by_piece[key] = self.by_piece.get(key, 0) + 1
        r = self.r.get(c.tenant)
        if v is None:
            self.decisions.note(
                now, outcome, by, c.source, c.reason, c.anchor_id, c.tenant, kind, r, c.prob, missing, c.lead
            )
        else:
            self.decisions.note(
                now,
                outcome,
                by,
                c.source,
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
