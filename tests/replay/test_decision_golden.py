"""The planner's decision sequence, pinned (issue 36 item 6: "the live decision sequence identical on
a recorded stream"): small seeded request streams run through the live policy core (the replay's
scout policies drive ``proxy.core.ScoutPolicy`` exactly as the live runtime does: observe each
request and response end, plan on every event and on the 0.25 s timer), and every decision the
planner notes (each ``DecisionLog.note``, before the ring folds repeats) and every action it emits
is hashed. The digests in ``golden_decisions.json`` were recorded on the tree before the planner's
pieces became objects (issue 36 item 1): a refactor that claims "no behaviour change" must keep
them (one entry was re-recorded on purpose: ``gaia-no-resident-memo``, the alias of the merged
``resident`` piece; see its test). A deliberate behaviour change regenerates them:

    PYTHONPATH=$PWD .venv/bin/python -m tests.replay.test_decision_golden --write

Each decision is compared as (time, outcome, action reason, anchor, tenant length, kind, R, P,
missing, lead, saving, cost, P(kept)): the fields the ring held before issue 36 item 3 added the
source piece and the deciding piece (those are names for the same decisions, not new decisions).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from proxy.core import decisions as core_decisions
from proxy.core import policy as core_policy
from proxy.replay.runner import ReplaySettings, replay
from proxy.replay.traces import load_trace
from proxy.replay.workloads import generate, preset

GOLDEN = Path(__file__).with_name("golden_decisions.json")
_NOTE = inspect.signature(core_decisions.DecisionLog.note)  # read before capture() patches it

# name -> (stream, capacities (blocks), policies, PolicyConfig overrides); streams at busy 0.3 (seed 1)
# so that the planner acts, and not only stands back from a queued engine
CASES: dict[str, tuple[str, tuple[int, ...], tuple[str, ...], dict[str, Any]]] = {
    "swebench": ("swebench", (200, 600), ("scout-proxy", "scout-proxy+hints", "scout-proxy-lane"), {}),
    "gaia-contexts": ("gaia", (600, 1500), ("scout-proxy", "scout-proxy-priority"), {"successor_contexts": 2}),
    "selector": ("selector", (300, 600), ("scout-proxy",), {}),
    "pipeline-request": ("pipeline", (300, 600), ("scout-proxy",), {"plan_trigger": "request"}),
    "fanout": ("fanout", (300, 600), ("scout-proxy",), {}),
    "odr-lineages": ("odr", (311,), ("scout-proxy",), {"lineage_resume": True}),
    # ablations: the pieces switched off by name (the merged resident piece under both its names)
    "gaia-no-resident": ("gaia", (600,), ("scout-proxy",), {"disabled_pieces": "resident"}),
    "gaia-no-resident-memo": ("gaia", (600,), ("scout-proxy",), {"disabled_pieces": "resident_memo"}),
    "gaia-ablated": (
        "gaia",
        (600,),
        ("scout-proxy",),
        {"disabled_pieces": "gate,deferred,cooldown,duplicate,action_gate", "successor_contexts": 2},
    ),
}


def _stream(name: str, tmp: Path) -> list:
    if name == "odr":
        from tests.corpus.text_traces import write

        path = tmp / "odr.jsonl"
        write("odr_run", 1, str(path), seed=3)
        return load_trace(path, "lmcache").requests
    sessions = {"swebench": 6, "gaia": 8, "selector": 6, "pipeline": 6, "fanout": 6}[name]
    return generate(preset(name, sessions=sessions, seed=1, busy=0.3))


def _note_fields(args: tuple, kwargs: dict) -> tuple:
    """The pre-issue-36 ring entry of one ``DecisionLog.note`` call (see the module docstring)."""
    b = _NOTE.bind(None, *args, **kwargs)
    b.apply_defaults()
    a = b.arguments
    reason = a["reason"] if "reason" in a else a["source"]  # the action reason (``source`` before issue 36)
    outcome = a["outcome"] if "outcome" in a else a["stage"]
    tail = ("kind", "r", "prob", "missing", "lead", "saving", "cost", "kept")
    return (a["at"], outcome, reason, a["anchor"], len(a["tenant"]), *(a[k] for k in tail))


def capture(case: str, tmp: Path) -> dict[str, Any]:
    """Run one case; the digest of its decisions and actions, with counts to read a mismatch by."""
    stream, caps, policies, over = CASES[case]
    notes: list[tuple] = []
    acts: list[tuple] = []
    note, plan = core_decisions.DecisionLog.note, core_policy.ScoutPolicy.plan

    def spy_note(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        notes.append(_note_fields(args, kwargs))
        return note(self, *args, **kwargs)

    def spy_plan(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = plan(self, *args, **kwargs)
        acts.extend((a.created, a.kind, a.reason, a.anchor_id, a.tokens, a.priority, a.deadline) for a in out)
        return out

    core_decisions.DecisionLog.note = spy_note  # type: ignore[method-assign]
    core_policy.ScoutPolicy.plan = spy_plan  # type: ignore[method-assign]
    try:
        replay(_stream(stream, tmp), list(caps), list(policies), ReplaySettings(scout_overrides=dict(over)))
    finally:
        core_decisions.DecisionLog.note = note  # type: ignore[method-assign]
        core_policy.ScoutPolicy.plan = plan  # type: ignore[method-assign]
    blob = json.dumps([notes, acts], separators=(",", ":")).encode()
    return {
        "decisions": len(notes),
        "actions": len(acts),
        "sha256": hashlib.sha256(blob).hexdigest(),
        "actions_sha256": hashlib.sha256(json.dumps(acts, separators=(",", ":")).encode()).hexdigest(),
        "outcomes": dict(sorted(Counter(n[1] for n in notes).items())),
        "reasons": dict(sorted(Counter(f"{a[1]}/{a[2]}" for a in acts).items())),
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_decision_sequence_is_the_recorded_one(case, tmp_path):
    want = json.loads(GOLDEN.read_text())[case]
    got = capture(case, tmp_path)
    # counts first: a mismatch says which outcome or action reason moved
    assert (got["outcomes"], got["reasons"]) == (want["outcomes"], want["reasons"])
    assert got == want


def test_the_old_resident_memo_name_switches_off_the_merged_resident_piece():
    """``resident_memo`` is an alias of ``resident`` since the two were merged (issue 36): its
    ablation is the piece's. Before the merge the two ablations emitted the same actions on this
    stream (the recorded ``actions_sha256``); their decisions differed only in which stage named
    the resident anchors (``resident`` vs ``not_worth_it``), so the alias's entry was re-recorded."""
    golden = json.loads(GOLDEN.read_text())
    assert golden["gaia-no-resident-memo"] == golden["gaia-no-resident"]


def test_the_cases_see_every_kind_of_decision():
    """The pinned streams are worth pinning: between them they exercise every source's action
    reason, the filters, the pricer and the picker (else a refactor could break a piece unseen)."""
    golden = json.loads(GOLDEN.read_text())
    outcomes = set().union(*(g["outcomes"] for g in golden.values()))
    reasons = {k.split("/")[1] for g in golden.values() for k in g["reasons"]}
    assert {"transition", "fanout", "tool_resume", "hint", "successor_context"} <= reasons, reasons
    assert {"acted", "cooldown", "resident", "not_worth_it", "gate_closed", "deferred"} <= outcomes, outcomes


if __name__ == "__main__":  # regenerate: python -m tests.replay.test_decision_golden --write
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        result = {c: capture(c, Path(d)) for c in sorted(CASES)}
    text = json.dumps(result, indent=1, sort_keys=True) + "\n"
    if "--write" in sys.argv:
        GOLDEN.write_text(text)
    print(text)
