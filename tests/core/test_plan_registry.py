"""The planner pipeline's registry: every piece has one name, the names in PolicyConfig and in the
registries agree, ``disabled_pieces`` parses (comma lists from --scout-set / policy_overrides) and
refuses unknown names, and switching a piece off takes exactly that piece out of the pipeline."""

from __future__ import annotations

import pytest

from proxy.core import EngineLoad, ScoutPolicy
from proxy.core.config import (
    FILTER_PIECES,
    PIECES,
    REMOVED_PIECES,
    REMOVED_SETTINGS,
    SOURCE_PIECES,
    VETO_PIECES,
    PolicyConfig,
    removed_names,
)
from proxy.core.plan_filters import FILTER_NAMES, FIRST, RESIDENCY, WARM
from proxy.core.plan_picker import VETO_NAMES
from proxy.core.plan_sources import SOURCE_NAMES, SOURCES, SWEEP_SOURCES, DirtySessions
from proxy.replay.cli import parse_overrides


def test_the_config_names_every_registered_piece_once():
    assert SOURCE_PIECES == SOURCE_NAMES
    assert sorted(FILTER_PIECES) == sorted(FILTER_NAMES)
    assert VETO_PIECES == VETO_NAMES
    assert len(set(PIECES)) == len(PIECES)
    top = {cls.name for cls in (*SOURCES, *SWEEP_SOURCES)}
    d = DirtySessions()
    per_session = {d.tool_resume.name, d.successors.name, d.successor_contexts.name}
    assert (top - {DirtySessions.name}) | per_session == set(SOURCE_NAMES)


def test_disabled_pieces_parse_from_a_comma_list_and_refuse_unknown_names():
    assert PolicyConfig().disabled_pieces == ()
    cfg = PolicyConfig().with_overrides(**parse_overrides(["disabled_pieces=tool_resume,cooldown"]))
    assert cfg.disabled_pieces == ("tool_resume", "cooldown")
    assert PolicyConfig(disabled_pieces=["gate"]).disabled_pieces == ("gate",)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown disabled_pieces"):
        PolicyConfig(disabled_pieces="tool_resume,no_such_piece")  # type: ignore[arg-type]


def test_removed_pieces_and_settings_are_dropped_not_refused():
    """Issue 26 removed three warm filters and the settings only they read; configurations that
    still name them (--scout-set, policy_overrides, disabled_pieces) keep working without them."""
    assert not set(REMOVED_PIECES) & set(PIECES + FILTER_NAMES)
    names = set(PolicyConfig.__dataclass_fields__)
    assert not set(REMOVED_SETTINGS) & names and "min_lead_s" in names  # min_lead_s: still read
    over = parse_overrides(
        ["warm_max_cache_share=0.75", "warm_lifetime_share=0", "disabled_pieces=warm_too_late,cooldown", "top_k=3"]
    )
    cfg = PolicyConfig().with_overrides(**over)
    assert cfg.disabled_pieces == ("cooldown",) and cfg.top_k == 3
    assert PolicyConfig(disabled_pieces=("warm_too_early",)).disabled_pieces == ()
    assert removed_names(over) == ["warm_max_cache_share", "warm_lifetime_share", "disabled_pieces=warm_too_late"]
    assert removed_names({"disabled_pieces": ["warm_too_big", "gate"], "cooldown_s": 1.0}) == [
        "disabled_pieces=warm_too_big"
    ]
    with pytest.raises(TypeError, match="unknown PolicyConfig fields"):
        PolicyConfig().with_overrides(warm_max_cache_shar=0.5)  # a typo still fails


@pytest.mark.parametrize("piece", PIECES)
def test_switching_a_piece_off_takes_it_out_of_the_pipeline(piece):
    on = ScoutPolicy(PolicyConfig()).planner
    off = ScoutPolicy(PolicyConfig(disabled_pieces=(piece,))).planner
    for p in (on, off):
        p.plan(1.0, EngineLoad())  # reads the pieces of its config
    assert off._off == {piece} and on._off == frozenset()
    names = {s.name for s in (*off._active, *off._active_sweep)}
    if piece in {cls.name for cls in (*SOURCES, *SWEEP_SOURCES)}:
        assert piece not in names and piece in {s.name for s in (*on._active, *on._active_sweep)}
    registry = dict((*FIRST, *RESIDENCY, *WARM))
    if piece in registry:
        assert registry[piece] in {f for group in on._filters for f in group}
        assert registry[piece] not in {f for group in off._filters for f in group}
    # the rest (per-session sources, the R gate, the deferral, the veto) are read from _off by
    # the piece itself: their behaviour is pinned in test_plan_sources / _filters / _picker
