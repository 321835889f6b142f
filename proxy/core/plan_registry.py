"""The planner's pieces, registered: one line each, in pipeline order, and everything the rest of
the proxy knows about them derived from these lines (docs/pieces.md).

Derived here: the source lists by cadence, the filter checks by phase, the vetoes (``pipeline``),
the names ``PolicyConfig.disabled_pieces`` accepts with their aliases (``NAMES``, ``resolve``), the
skip reasons (``SKIP_REASONS``: ``cachescout_planner_skips_total{reason}``), the (piece, skip
reason) pairs (``SKIP_PAIRS``: its ``piece`` label), each deciding piece's stage (``STAGE_OF``),
the action reasons (``ACTION_REASONS``: ``cachescout_actions_total{reason}``, the yield ledger's
signals) and each piece's settings (``SETTINGS``). tests/core/test_plan_registry.py checks that
every piece declares what it records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import cast

from .actions import DEPLOYED_ORDER
from .decisions import ACTED
from .plan_contexts import SuccessorContexts
from .plan_filters import (
    FIRST,
    RESIDENCY,
    WARM,
    Cooldown,
    Deferred,
    Duplicate,
    Filter,
    Gate,
    HostTier,
    Resident,
    WarmAllowed,
)
from .plan_lineage import LineageResume
from .plan_picker import PICKER_SKIPS, PRICER_SKIPS, ActionGate, CandidateCheck, Phases, Veto
from .plan_piece import AT_SWEEP, FILTER, PER_SESSION, PER_TICK, PICKER, PRICER, SESSIONS, SOURCE, TICK, VETO, Piece
from .plan_resume import SessionSweep, ToolResume
from .plan_sources import AnchorSweep, FanoutParents, RuntimeHintsSource, Successors
from .plan_tick import SessionSource, TickSource
from .plan_warm_too_late import WarmTooLate

# The registry: one line per piece, in the order they run (sources by cadence, then filters by
# phase, then vetoes). A source's cadence and a filter's phases are its own class attributes.
PIECES: tuple[type[Piece], ...] = (
    ToolResume,  # per session that changed: its tool pause (plan_resume.py)
    Successors,  # ... its predicted next agents' anchors
    SuccessorContexts,  # ... their contexts in it (plan_contexts.py; off unless successor_contexts > 0)
    FanoutParents,  # every tick: parents of detected fan-outs
    RuntimeHintsSource,  # ... runtime hints (hint_actions.HintDriver)
    LineageResume,  # ... text views' paused lineages (plan_lineage.py; off unless lineage_resume)
    AnchorSweep,  # at the sweep cadence: survival-ranked anchors
    SessionSweep,  # ... tool-paused sessions whose pauses are not learned yet (plan_resume.py)
    Gate,  # filters the sources ask: the R gate
    Deferred,  # ... the deferral of a running request's successors
    Duplicate,  # filters, first phase
    Cooldown,
    HostTier,  # residency phase (Resident runs in both)
    Resident,
    WarmAllowed,  # warm phase
    WarmTooLate,  # ... opt-in (piece_params): no warm that cannot finish before its demand
    ActionGate,  # vetoes
)

# the skip reasons of the stages that are not pieces (planner.py, plan_sources.SessionLoop, plan_picker.py)
TICK_SKIPS = ("tick_engine_busy", "tick_engine_shared", "tick_overflow")
SESSIONS_SKIPS = ("no_agent",)
BUILT_IN: tuple[tuple[str, str, tuple[str, ...]], ...] = (  # (name, stage, skip reasons)
    (TICK, TICK, TICK_SKIPS),
    (SESSIONS, SOURCE, SESSIONS_SKIPS),
    (PRICER, PRICER, PRICER_SKIPS),
    (PICKER, PICKER, PICKER_SKIPS),
)

NAMES: tuple[str, ...] = tuple(p.name for p in PIECES)  # what disabled_pieces accepts (and ALIASES)
ALIASES: dict[str, str] = {a: p.name for p in PIECES for a in p.aliases}  # old name -> piece
SOURCES = tuple(p for p in PIECES if p.kind == SOURCE)
FILTERS = tuple(p for p in PIECES if p.kind == FILTER)
VETOES = tuple(p for p in PIECES if p.kind == VETO)
STAGE_OF: dict[str, str] = {**{p.name: p.kind for p in PIECES}, **{n: st for n, st, _ in BUILT_IN}}
SKIP_PAIRS: tuple[tuple[str, str], ...] = (
    *((n, s) for n, _, skips in BUILT_IN[:2] for s in skips),
    *((p.name, s) for p in PIECES for s in p.skips),
    *((n, s) for n, _, skips in BUILT_IN[2:] for s in skips),
)
SKIP_REASONS: tuple[str, ...] = tuple(dict.fromkeys(s for _, s in SKIP_PAIRS))
OUTCOMES = (*SKIP_REASONS, ACTED)
_DECLARED = tuple(dict.fromkeys(r for p in SOURCES for r in p.reasons))
ACTION_REASONS: tuple[str, ...] = (  # the sources' reasons, the deployed ones in their order first
    *(r for r in DEPLOYED_ORDER if r in _DECLARED),
    *(r for r in _DECLARED if r not in DEPLOYED_ORDER),
)
SETTINGS: dict[str, tuple[str, ...]] = {p.name: p.settings for p in PIECES}


def resolve(names: Iterable[str], params: Mapping[str, object] | None = None) -> frozenset[str]:
    """The pieces switched off: ``disabled_pieces`` (aliases mapped to their piece) and the opt-in
    pieces ``piece_params`` does not name; an unknown name in either raises (config.REMOVED_PIECES
    are dropped before, by PolicyConfig)."""
    params = params or {}
    unknown = [n for n in params if n not in NAMES]
    if unknown:
        raise ValueError(f"unknown piece_params {unknown}; known: {', '.join(NAMES)}")
    out: set[str] = {p.name for p in PIECES if p.opt_in and p.name not in params}
    for n in names:
        name = ALIASES.get(n, n)
        if name not in STAGE_OF or name in (TICK, SESSIONS, PRICER, PICKER):
            known = ", ".join((*NAMES, *ALIASES))
            raise ValueError(f"unknown disabled_pieces [{n!r}]; known: {known}")
        out.add(name)
    return frozenset(out)


@dataclass(slots=True)
class Pipeline:
    """One instance of each registered piece (their state lives on them), and, for a set of pieces
    switched off, the enabled ones as the lists the planner runs (``enabled``)."""

    pieces: dict[str, Piece]

    @classmethod
    def build(cls) -> Pipeline:
        return cls({p.name: p() for p in PIECES})

    def enabled(
        self, off: frozenset[str], params: Mapping[str, Mapping[str, object]] | None = None, cfg: object = None
    ) -> Enabled:
        """The lists the planner runs for pieces ``off`` switched off; a piece ``idle`` under
        ``cfg`` is left out of them too (it would return at once)."""
        on = [p for p in self.pieces.values() if p.name not in off]
        lists_on = [p for p in on if cfg is None or not p.idle(cfg)]
        for p in on:
            if p.Params is not None:  # its parameters for this config (unknown keys raise)
                p.configure(p.Params(**(params or {}).get(p.name, {})))
        per_session = [cast(SessionSource, p) for p in lists_on if p.kind == SOURCE and p.cadence == PER_SESSION]
        per_tick = [cast(TickSource, p) for p in lists_on if p.kind == SOURCE and p.cadence == PER_TICK]
        at_sweep = [cast(TickSource, p) for p in lists_on if p.kind == SOURCE and p.cadence == AT_SWEEP]
        by: dict[CandidateCheck, str] = {}
        lists: dict[str, list[CandidateCheck]] = {FIRST: [], RESIDENCY: [], WARM: []}
        for f in lists_on:
            if isinstance(f, Filter):
                for phase in f.phases:
                    check: CandidateCheck = getattr(f, phase)
                    lists[phase].append(check)
                    by[check] = f.name
        vetoes = tuple(p for p in lists_on if isinstance(p, Veto))
        phases = Phases(tuple(lists[FIRST]), tuple(lists[RESIDENCY]), tuple(lists[WARM]), vetoes, by)
        return Enabled(off, per_session, per_tick, at_sweep, phases)


@dataclass(slots=True)
class Enabled:
    """The pieces a configuration leaves on, as the planner runs them."""

    off: frozenset[str]
    per_session: list[SessionSource]
    per_tick: list[TickSource]
    at_sweep: list[TickSource]
    phases: Phases
