"""Lineages of text views (core/lineages.py) and the lineage_resume source (core/plan_lineage.py):
a call that extends (or re-renders) an earlier call beyond the agent's anchor joins its lineage
whatever the id says; a resume after a pause is learned; a paused lineage is offered as a resume
when its learned resume share passes ``tool_resume_min_p``, and dropped (``resume_unlikely``) when not."""

from __future__ import annotations

from proxy.core import EngineLoad, ScoutPolicy
from proxy.core.actions import REASON_TOOL_RESUME
from proxy.core.config import PolicyConfig
from proxy.core.lineages import FIRST, LATER, LineageBook
from proxy.core.plan_lineage import LineageResume
from proxy.core.view import ResponseOutcome, view_from_blocks

ANCHOR = tuple(range(1000, 1020))  # 20 blocks every call of the agent shares


def chain(*parts: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(h for p in parts for h in p)


def ones(h: tuple[int, ...]) -> tuple[int, ...]:
    return (16,) * len(h)


def test_an_append_only_call_joins_its_lineage_and_expects_all_of_it():
    b = LineageBook()
    a1 = chain(ANCHOR, tuple(range(1, 11)))
    b1 = chain(ANCHOR, tuple(range(101, 111)))
    assert b.on_request(1, "", a1, ones(a1), 20, "p", 0.0) is None
    b.on_response(1, 1.0)
    b.on_request(2, "", b1, ones(b1), 20, "p", 2.0)  # another lineage: shares only the anchor
    b.on_response(2, 3.0)
    assert len(b) == 2 and set(b.paused) == {1, 2}
    a2 = chain(a1, tuple(range(11, 31)))  # a1's continuation, after b1 ran
    kept = b.on_request(3, "", a2, ones(a2), 20, "p", 5.0)
    assert kept == a1[-1]  # what a resume of a1 would have kept: the conversion key
    ln = b.lineages[1]
    assert ln.calls == 2 and ln.expect == a2 and 1 not in b.paused
    st = b.stats[""]
    assert st.pauses[FIRST] == 2 and st.resumes[FIRST] == 1 and list(st.gaps) == [4.0]
    assert b.resumes == 1


def test_a_re_rendered_call_joins_on_its_shared_prefix_and_expects_only_that():
    b = LineageBook()
    task = tuple(range(1, 9))
    c1 = chain(ANCHOR, task, tuple(range(500, 530)))  # template + task + screen 1
    c2 = chain(ANCHOR, task, tuple(range(600, 640)))  # same task, screen 2
    b.on_request(1, "", c1, ones(c1), 20, "p", 0.0)
    b.on_response(1, 1.0)
    b.on_request(2, "", c2, ones(c2), 20, "p", 3.0)
    assert len(b) == 1
    assert b.lineages[1].expect == chain(ANCHOR, task)  # the screen is not what the next call re-reads


def test_a_re_cut_partial_last_block_still_counts_as_an_extension():
    b = LineageBook()
    a1 = chain(ANCHOR, tuple(range(1, 11)))
    b.on_request(1, "", a1, ones(a1), 20, "p", 0.0)
    b.on_response(1, 1.0)
    a2 = chain(a1[:-1], (77,), tuple(range(11, 31)))  # text cut globally: a1's partial last block re-cut
    b.on_request(2, "", a2, ones(a2), 20, "p", 3.0)
    assert b.lineages[1].expect == a2  # append-only: its next call re-reads all of it


def test_the_floor_is_never_a_lineage_and_tenants_never_mix():
    b = LineageBook()
    a1 = chain(ANCHOR, tuple(range(1, 11)))
    b.on_request(1, "", a1, ones(a1), 20, "p", 0.0)
    b.on_request(2, "t2", a1, ones(a1), 20, "p", 0.0)  # same chain, other tenant
    other = chain(ANCHOR, tuple(range(200, 210)))
    b.on_request(3, "", other, ones(other), 20, "p", 0.0)  # shares exactly the floor
    assert len(b) == 3
    assert b.on_request(4, "", ANCHOR, ones(ANCHOR), 20, "p", 0.0) is None and len(b) == 3  # only the anchor


def test_probability_is_the_learned_resume_share_times_the_gaps():
    b = LineageBook()
    st = b.tenant("")
    st.pauses[:] = [10, 10]
    st.resumes[:] = [9, 2]
    st.gaps.extend([2.0, 3.0, 4.0])
    a1 = chain(ANCHOR, tuple(range(1, 11)))
    b.on_request(1, "", a1, ones(a1), 20, "p", 0.0)
    b.on_response(1, 1.0)
    ln = b.lineages[1]
    assert abs(b.probability(ln, 2.0, 60.0, 0.3, 3) - (9 + 0) / 11) < 1e-9  # an 11th FIRST pause now
    ln.calls = 2
    assert abs(b.probability(ln, 2.0, 60.0, 0.3, 3) - 2 / 10) < 1e-9
    assert b.probability(ln, 100.0, 60.0, 0.3, 3) < 0.05 * 0.21  # waited longer than any gap seen
    assert b.stats[""].pauses[LATER] == 10


def _policy() -> ScoutPolicy:
    return ScoutPolicy(PolicyConfig(residency_capacity_tokens=100_000, prefill_tokens_per_s=1e6, lineage_resume=True))


def _call(sp: ScoutPolicy, h: tuple[int, ...], t0: float, t1: float, sid: str | None = "run") -> None:
    v = view_from_blocks("", h, ones(h), session_id=sid, anchor_payload="a", context_payload="c")
    obs = sp.observe_request(v, t0)
    sp.observe_response(obs.request_id, ResponseOutcome(finish_reason="stop", prompt_tokens=16 * len(h)), t1)


def test_the_source_offers_a_paused_lineage_once_its_resumes_are_learned():
    sp = _policy()
    src = LineageResume()
    cfg = sp.config
    # a run id over interleaved lineages: the session follows the id, the lineages follow continuity
    for k in range(4):
        base = chain(ANCHOR, tuple(range(100 * k + 1, 100 * k + 11)))
        _call(sp, base, 10.0 * k, 10.0 * k + 0.5)
        _call(sp, chain(base, tuple(range(100 * k + 50, 100 * k + 60))), 10.0 * k + 3.0, 10.0 * k + 3.5)
    assert len(sp.sessions) == 1 and len(sp.lineages) == 4 and sp.lineages.resumes == 4
    t = sp.planner.tick(40.0)
    src.collect(t)  # the last lineage paused at 33.5: its LATER share is 0 of 4 -> unlikely
    assert not t.out and sp.planner.skipped["resume_unlikely"] >= 1
    new = chain(ANCHOR, tuple(range(901, 911)))
    _call(sp, new, 41.0, 41.5)  # a first call: FIRST share 4 of 4 (then 4 of 5 with this one)
    t = sp.planner.tick(42.0)
    src.collect(t)
    assert len(t.out) == 1
    c = t.out[0]
    assert c.reason == REASON_TOOL_RESUME and c.context and c.warm_ok and c.hashes == new
    assert cfg.tool_resume_min_p <= c.prob <= 1.0
    t = sp.planner.tick(42.1)
    src.collect(t)  # offered once per pause (the sweep asks again)
    assert not t.out


def test_off_by_default_no_lineage_is_kept():
    sp = ScoutPolicy(PolicyConfig(residency_capacity_tokens=100_000))
    h = chain(ANCHOR, tuple(range(1, 11)))
    _call(sp, h, 0.0, 1.0)
    _call(sp, chain(h, (5, 6, 7)), 3.0, 4.0)
    assert len(sp.lineages) == 0 and sp.lineages.resumes == 0


def test_chat_views_and_marked_anchors_keep_no_lineages():
    sp = _policy()
    h = chain(ANCHOR, tuple(range(1, 11)))
    v = view_from_blocks("", h, ones(h), anchor_blocks=20, session_id="s", anchor_payload="a", context_payload="c")
    sp.observe_request(v, 0.0)
    assert len(sp.lineages) == 0
    sp.plan(1.0, EngineLoad())  # and the source has nothing to offer
