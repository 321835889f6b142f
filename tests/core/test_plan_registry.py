"""The planner pipeline's registry (plan_registry.py): every piece has one name and declares what
it records, everything else is derived from the registered pieces, ``disabled_pieces`` parses
(comma lists from --scout-set / policy_overrides), accepts the old aliases and refuses unknown
names, and switching a piece off takes exactly that piece out of the pipeline."""

from __future__ import annotations

from dataclasses import fields

import pytest

from proxy.core import EngineLoad, ScoutPolicy
from proxy.core.actions import (
    REASON_FANOUT,
    REASON_SUCCESSOR_CONTEXT,
    REASON_SWEEP,
    REASON_TOOL_RESUME,
    REASON_TRANSITION,
)
from proxy.core.config import REMOVED_PIECES, REMOVED_SETTINGS, PolicyConfig, removed_names
from proxy.core.plan_filters import PHASES, Filter
from proxy.core.plan_piece import KINDS, SOURCE
from proxy.core.plan_registry import (
    ACTION_REASONS,
    ALIASES,
    NAMES,
    PIECES,
    SETTINGS,
    SKIP_PAIRS,
    SKIP_REASONS,
    SOURCES,
    STAGE_OF,
    resolve,
)
from proxy.replay.cli import parse_overrides


def test_every_piece_is_registered_once_and_says_what_it_is():
    assert len(set(NAMES)) == len(NAMES) == len(PIECES)
    assert not set(ALIASES) & set(NAMES)
    for p in PIECES:
        assert p.kind in KINDS and p.name and p.name == p.name.lower()
        if p.kind == SOURCE:
            assert p.cadence and p.reasons, p.name  # when it runs and what its actions are called
        if issubclass(p, Filter):
            assert set(p.phases) <= set(PHASES) and p.skips, p.name
    assert set(STAGE_OF) >= set(NAMES)


def test_metric_label_sets_are_derived_from_the_pieces():
    # the action reasons: the deployed label values, each carried by some source
    assert set(ACTION_REASONS) == {
        REASON_TRANSITION, REASON_FANOUT, REASON_TOOL_RESUME, REASON_SWEEP, REASON_SUCCESSOR_CONTEXT
    }  # fmt: skip
    assert set(ACTION_REASONS) == {r for p in SOURCES for r in p.reasons}
    # every skip reason is recorded by a declared (piece, reason) pair, each pair once
    assert len(set(SKIP_PAIRS)) == len(SKIP_PAIRS) and {s for _, s in SKIP_PAIRS} == set(SKIP_REASONS)
    assert all(piece in STAGE_OF for piece, _ in SKIP_PAIRS)
    assert len(SKIP_PAIRS) <= 40  # cachescout_planner_skips_total{reason, piece} stays small


def test_each_piece_names_real_settings():
    known = {f.name for f in fields(PolicyConfig)}
    for name, settings in SETTINGS.items():
        assert set(settings) <= known, (name, set(settings) - known)


def test_the_old_names_resolve_to_their_pieces():
    assert ALIASES == {"resident_memo": "resident"}
    opt_in = {p.name for p in PIECES if p.opt_in}  # off unless piece_params names them
    assert resolve(["resident_memo", "cooldown"]) == {"resident", "cooldown"} | opt_in
    with pytest.raises(ValueError, match="unknown disabled_pieces"):
        resolve(["no_such_piece"])
    with pytest.raises(ValueError, match="unknown disabled_pieces"):
        resolve(["pricer"])  # a stage, not a piece


def test_disabled_pieces_parse_from_a_comma_list_and_refuse_unknown_names():
    assert PolicyConfig().disabled_pieces == ()
    cfg = PolicyConfig().with_overrides(**parse_overrides(["disabled_pieces=tool_resume,cooldown"]))
    assert cfg.disabled_pieces == ("tool_resume", "cooldown")
    assert PolicyConfig(disabled_pieces=["gate"]).disabled_pieces == ("gate",)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown disabled_pieces"):  # refused when the planner is built
        ScoutPolicy(PolicyConfig(disabled_pieces="tool_resume,no_such_piece"))  # type: ignore[arg-type]


def test_removed_pieces_and_settings_are_dropped_not_refused():
    """Issue 26 removed three warm filters and the settings only they read; configurations that
    still name them (--scout-set, policy_overrides, disabled_pieces) keep working without them."""
    assert not set(REMOVED_PIECES) & set(NAMES)
    names = set(PolicyConfig.__dataclass_fields__)
    assert not set(REMOVED_SETTINGS) & names and "min_lead_s" in names  # min_lead_s: still read
    over = parse_overrides(
        ["warm_max_cache_share=0.75", "warm_lifetime_share=0", "disabled_pieces=warm_too_big,cooldown", "top_k=3"]
    )
    cfg = PolicyConfig().with_overrides(**over)
    assert cfg.disabled_pieces == ("cooldown",) and cfg.top_k == 3
    assert PolicyConfig(disabled_pieces=("warm_too_early",)).disabled_pieces == ()
    assert removed_names(over) == ["warm_max_cache_share", "warm_lifetime_share", "disabled_pieces=warm_too_big"]
    assert removed_names({"disabled_pieces": ["warm_too_big", "gate"], "cooldown_s": 1.0}) == [
        "disabled_pieces=warm_too_big"
    ]
    with pytest.raises(TypeError, match="unknown PolicyConfig fields"):
        PolicyConfig().with_overrides(warm_max_cache_shar=0.5)  # a typo still fails


def test_piece_params_parse_and_refuse_unknown_pieces():
    """A piece's own parameters (plan_piece.Piece.Params) come from ``piece_params``: a mapping, or
    JSON from --scout-set / policy_overrides; a name that is no piece is refused when the planner
    is built, like an unknown disabled_pieces name."""
    cfg = PolicyConfig().with_overrides(**parse_overrides(['piece_params={"cooldown": {}}']))
    assert cfg.piece_params == {"cooldown": {}}
    assert PolicyConfig(piece_params="").piece_params == {}  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="piece_params"):
        PolicyConfig(piece_params="[1]")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown piece_params"):
        ScoutPolicy(PolicyConfig(piece_params={"no_such_piece": {}}))


@pytest.mark.parametrize("piece", [*NAMES, *ALIASES])
def test_switching_a_piece_off_takes_it_out_of_the_pipeline(piece):
    on = ScoutPolicy(PolicyConfig()).planner
    off = ScoutPolicy(PolicyConfig(disabled_pieces=(piece,))).planner
    for p in (on, off):
        p.plan(1.0, EngineLoad())  # reads the pieces of its config
    name = ALIASES.get(piece, piece)
    opt_in = {p.name for p in PIECES if p.opt_in}  # off unless piece_params names them
    assert off._on.off == opt_in | {name} and on._on.off == opt_in
    assert not off.enabled(name) and on.enabled(name) is (name not in opt_in)

    def listed(p: object) -> set[str]:
        e = p._on  # type: ignore[attr-defined]
        checks = {*e.phases.first, *e.phases.residency, *e.phases.warm}
        return {s.name for s in (*e.per_session, *e.per_tick, *e.at_sweep, *e.phases.vetoes)} | {
            e.phases.by[c] for c in checks
        }

    assert listed(on) - listed(off) <= {name}
    # the R gate and the deferral have no phase: the sources ask them (Tick.gate, Tick.defers), and
    # their behaviour switched off is pinned in test_plan_filters
