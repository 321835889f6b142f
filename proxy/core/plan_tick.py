"""What one tick offers the planner's sources: ``Tick``, the one interface a source is written
against (docs/pieces.md), and the two shapes a source takes.

A source reads the tick's state (config, agents, sessions, the residency shadow, the sessions that
changed, parked fan-out parents, runtime hints, lineages), appends ``Candidate``s to ``out``, asks
the filters a source asks (``gate``, ``deferred``, ``cooldown``, ``resident``) and records what it
drops with ``drop``. It never reaches into the planner: the planner builds the tick
(``Planner.tick``) and hands it over.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .agents import Agent, AgentRegistry
from .candidates import Candidate, FanoutParent, Recorder, RuntimeHints
from .config import PolicyConfig
from .lineages import LineageBook
from .plan_filters import Cooldown, Deferred, Gate, Resident
from .residency import ResidencyShadow
from .sessions import Session, SessionTracker


@dataclass(slots=True)
class Tick:
    """One plan() call as its sources see it."""

    now: float
    cfg: PolicyConfig
    registry: AgentRegistry
    sessions: SessionTracker
    residency: ResidencyShadow
    dirty: dict[tuple[str, str], None]  # sessions that changed since the last tick
    fanout: dict[tuple[str, str], FanoutParent]  # parked fan-out parents
    hints: RuntimeHints | None
    lineages: LineageBook | None  # text views' lineages (lineages.py), when the policy keeps them
    off: frozenset[str]  # the pieces switched off (registry names; aliases resolved)
    rec: Recorder
    gates: Gate
    resident: Resident
    last_acted: dict[str, float]  # the picker's (plan_picker.Spend): what Cooldown reads
    sweep_due: bool = False
    calm: bool = True  # no client request prefills in the engine, nor waits there (outside the slack lane)
    out: list[Candidate] = field(default_factory=list)

    def on(self, piece: str) -> bool:
        """Is the piece (its registry name) switched on?"""
        return piece not in self.off

    def gate(self, tenant: str) -> bool:
        """The tenant's R gate, decided once per tick; open when the gate is switched off."""
        g = self.gates.verdicts.get(tenant)  # decided already this tick (the common case)
        if g is not None:
            return g
        return Gate.name in self.off or self.gates.verdict(tenant, self.registry, self.cfg, self.now)

    def defers(self, gap: float | None, need_s: float) -> bool:
        """``Deferred``'s rule, when it is switched on."""
        return Deferred.name not in self.off and Deferred.holds(gap, need_s, self.cfg)

    def cooling(self, anchor: str) -> bool:
        """``Cooldown``'s rule, when it is switched on."""
        off, cfg = self.off, self.cfg
        return Cooldown.name not in off and Cooldown.cooling(self.last_acted, anchor, self.now, cfg.cooldown_s)

    def drop(
        self,
        by: str,
        skip: str,
        source: str = "",
        reason: str = "",
        anchor: str = "",
        tenant: str = "",
        prob: float | None = None,
    ) -> None:
        """Record a candidate not offered: piece ``by`` skipped it for ``skip``; ``source`` is the
        source piece that would have offered it, ``reason`` its action reason."""
        self.rec.drop(by, skip, self.now, source, reason, anchor, tenant, prob)


class TickSource(Protocol):
    """A source run once per tick (or per sweep): appends to ``tick.out``."""

    name: str

    def collect(self, tick: Tick) -> None: ...


class SessionSource(Protocol):
    """A source offered each session that changed (plan_sources.SessionLoop), in registry order."""

    name: str

    def begin(self, tick: Tick) -> None: ...

    def session(self, tick: Tick, s: Session, agent: Agent, paused: bool, lead: float | None) -> None: ...
