"""What a planner piece is: one object per source, filter or veto that owns its name, what it
records, its switch and its state (docs/pieces.md says how to add one).

    sources (plan_sources.py ...) -> filters (plan_filters.py) -> pricer -> picker -> vetoes (plan_picker.py)

A piece is a class with a few class attributes, read by the registry (plan_registry.py) and by
nothing else: ``name`` (its name in ``PolicyConfig.disabled_pieces``, in the decision ring's
``source`` / ``by`` and in ``cachescout_planner_skips_total{piece}``), ``kind`` (source, filter or
veto), ``skips`` (the skip reasons it records: the ring's ``outcome``, the metric's ``reason``),
``cadence`` (a source's: per session that changed, per tick, at the sweep), ``reasons`` (a
source's action reasons: ``cachescout_actions_total{reason}`` and the yield ledger's
signals), ``aliases`` (old names ``disabled_pieces`` still accepts), ``settings`` (the ``PolicyConfig``
fields it reads: the "settings per piece" table of docs/policy.md), and, for a piece with
parameters of its own, ``Params`` (a frozen dataclass set from ``PolicyConfig.piece_params``) and
``opt_in`` (off unless ``piece_params`` names it: a new piece ships without changing behaviour). Its state
(a source's wake heap, the resident memo, the gate's verdicts this tick) lives on the instance:
the planner builds one instance of each registered piece.

Why this shape (modelled on the llm-d endpoint picker's plugins: a type, its parameters, a factory,
a test and one registration line): the pipeline's lists, the piece names ``disabled_pieces``
accepts and the metric label sets are derived from the registered pieces, so adding a piece is one
module, its test and one line in ``plan_registry.PIECES``, and removing one is deleting them.
"""

from __future__ import annotations

from typing import Any, ClassVar

# a piece's kind: where it sits in the pipeline (the ring's ``stage`` for what it drops)
SOURCE = "source"
FILTER = "filter"
VETO = "veto"
KINDS = (SOURCE, FILTER, VETO)
# the stages that are not registered pieces (each has one place in planner.py / plan_picker.py)
TICK = "tick"  # the per-tick gates: the engine queued or shared, the running set overflowing
SESSIONS = "sessions"  # the per-session loop that offers each changed session to the session sources
PRICER = "pricer"  # economics.assess: wait, nothing, or an action worth its cost
PICKER = "picker"  # slots and the token bucket; what it picks is ``acted``

# a source's cadence: per session that changed (``session``), every tick (``collect``), or only when
# the sweep is due (every ``sweep_interval_s``; ``collect``)
PER_SESSION = "per_session"
PER_TICK = "per_tick"
AT_SWEEP = "at_sweep"


class Piece:
    """The registry's view of a piece (class attributes; see the module docstring)."""

    name: ClassVar[str]
    kind: ClassVar[str]
    skips: ClassVar[tuple[str, ...]] = ()
    reasons: ClassVar[tuple[str, ...]] = ()
    aliases: ClassVar[tuple[str, ...]] = ()
    settings: ClassVar[tuple[str, ...]] = ()
    cadence: ClassVar[str] = ""  # a source's: PER_SESSION, PER_TICK or AT_SWEEP
    # its own parameters: a small frozen dataclass, built from PolicyConfig.piece_params[name]
    # (unknown keys raise when the planner is built); None: it reads PolicyConfig fields only
    Params: ClassVar[type[Any] | None] = None
    opt_in: ClassVar[bool] = False  # off unless PolicyConfig.piece_params names it

    @classmethod
    def idle(cls, cfg: Any) -> bool:
        """Nothing to do under this config (e.g. a source whose setting is 0): left out of the
        pipeline's lists, as if switched off, so the planner does not call it to return at once."""
        return False

    def configure(self, params: Any) -> None:
        """Its ``Params`` for the current config (called whenever the config changes)."""
        self.params = params
