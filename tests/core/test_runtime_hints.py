"""Runtime hints in the core: each kind changes the planner's actions as documented, every source is
calibrated, a liar stops driving actions within N hints, directives need the operator's listing."""

from __future__ import annotations

import pytest

from proxy.core.actions import REASON_FANOUT, REASON_TOOL_RESUME, REASON_TRANSITION
from proxy.core.hint_actions import Hint, HintDriver
from proxy.core.hint_checks import CheckBook
from proxy.core.hint_trust import TrustBook
from proxy.core.hints import ACCEPTED, FACT, IGNORED_STANDING, PREDICTION, REFUSED, HintConfig, ignore_bound, source_id

from .conftest import ANCHOR, BLOCK, Workload


def driven(workload, **kw) -> tuple[Workload, HintDriver]:
    w = workload(**kw)
    d = HintDriver(w.policy, HintConfig(directive_sources=frozenset({"op"})))
    w.policy.planner.hints = d
    return w, d


def reasons(actions):
    return sorted((a.kind, a.reason) for a in actions)


def paused(w: Workload, session: str, now: float, finish: str = "stop"):
    """One request of agent 0 in ``session`` (3 history blocks), then a response with ``finish``."""
    w.step(0, session, now, finish=finish, dur=0.1)
    w.hist[session].extend([90_000_000 + len(w.hist[session]) + k for k in range(2)])
    return w.policy.sessions.sessions[("", session)]


def evict_all(w: Workload, now: float) -> None:
    w.junk(w.policy.config.residency_capacity_tokens * 2, now)


def test_tool_started_makes_an_ungated_tool_resume_of_a_session_that_did_not_end_in_tool_calls(workload):
    w, d = driven(workload, residency_capacity_tokens=BLOCK * 40)
    s = paused(w, "s1", 1.0)  # finish "stop": no tool_resume of its own
    evict_all(w, 1.5)
    assert not w.policy.plan(2.0)  # gate shut (nothing learned), no hint: nothing
    assert d.submit([Hint("tool_started", "s1")], "rt", 2.0) == [ACCEPTED]
    acts = w.policy.plan(2.1)
    assert reasons(acts) == [("warm", REASON_TOOL_RESUME)]
    assert acts[0].block_hashes == s.hashes
    # the session resumes: the plan is done, the check confirms the fact
    w.step(0, "s1", 5.0)
    d.observe("", "s1", None, None, 5.0)
    assert not d.plans
    assert d.trust.sources["rt"].standing(FACT) > 1 / 3


def test_trusted_expected_duration_defers_the_warm_until_the_cache_would_keep_it(workload):
    w, d = driven(workload, residency_capacity_tokens=BLOCK * 40)
    for k in range(3):  # earn prediction standing with accurate durations
        paused(w, f"e{k}", 1.0 + k)
        d.submit([Hint("tool_started", f"e{k}", expected_s=1.0)], "rt", 1.2 + k)
        w.step(0, f"e{k}", 2.2 + k)
        d.observe("", f"e{k}", None, None, 2.2 + k)
    assert d.trust.weight("rt", PREDICTION) >= 0.5
    paused(w, "long", 10.0)
    w.policy.residency.on_engine_truth(capacity_tokens=BLOCK * 40)
    evict_all(w, 10.2)
    d.submit([Hint("tool_started", "long", expected_s=10_000.0)], "rt", 10.3)
    life = w.policy.residency.lifetime_s()
    assert life is not None and life < 10_000.0
    assert not [a for a in w.policy.plan(10.4) if a.reason == REASON_TOOL_RESUME]
    d.submit([Hint("tool_finished", "long")], "rt", 11.0)  # now imminent: warm at once
    assert reasons(w.policy.plan(11.1)) == [("warm", REASON_TOOL_RESUME)]


def test_fanout_keeps_the_parent_context_until_the_branches_arrive(workload):
    w, d = driven(workload, residency_capacity_tokens=BLOCK * 40)
    s = paused(w, "p", 1.0)
    evict_all(w, 1.5)
    d.submit([Hint("fanout", "p", branches=2)], "rt", 2.0)
    acts = w.policy.plan(2.1)
    assert reasons(acts) == [("warm", REASON_FANOUT)] and acts[0].block_hashes == s.hashes
    for t in (3.0, 3.1):
        w.step(0, "p", t)
        d.observe("", "p", None, None, t)
    assert not d.plans and d.trust.sources["rt"].kinds["fanout"].score == 1.0


def test_next_agent_warms_the_named_agents_anchor_with_a_shut_gate(workload):
    w, d = driven(workload, residency_capacity_tokens=BLOCK * 40)
    obs = w.step(2, "x", 0.5)  # agent 2 seen once, named by its request
    d.observe("", "x", obs.agent_id, "coder", 0.5)
    paused(w, "s", 1.0)
    evict_all(w, 1.5)
    assert d.submit([Hint("next_agent", "s", agent="coder", probability=0.9)], "rt", 2.0) == [IGNORED_STANDING]
    # a new source's predictions are not trusted; one confirmed prediction earns it
    w.step(2, "s", 2.5)
    d.observe("", "s", obs.agent_id, "coder", 2.5)
    evict_all(w, 2.8)
    assert d.submit([Hint("next_agent", "s", agent="coder", probability=1.0)], "rt", 3.0) == [ACCEPTED]
    acts = w.policy.plan(3.1)
    assert reasons(acts) == [("warm", REASON_TRANSITION)]
    assert acts[0].block_hashes == tuple(w.anchor(2))


def earn(w: Workload, d: HintDriver, source: str, now: float) -> None:
    """One confirmed fact: a tool_started whose session resumed."""
    paused(w, f"earn-{source}", now)
    d.submit([Hint("tool_started", f"earn-{source}")], source, now)
    w.step(0, f"earn-{source}", now + 0.2)
    d.observe("", f"earn-{source}", None, None, now + 0.2)


def test_a_new_sources_release_waits_for_one_confirmed_fact(workload):
    w, d = driven(workload)
    paused(w, "r", 1.0)
    assert d.submit([Hint("session_ended", "r")], "rt", 1.1) == [IGNORED_STANDING]
    assert ("", "r") in w.policy.sessions.sessions
    earn(w, d, "rt", 1.2)
    assert d.submit([Hint("session_ended", "r")], "rt", 1.5) == [ACCEPTED]
    assert ("", "r") not in w.policy.sessions.sessions


def test_session_ended_stops_every_protective_action_at_once(workload):
    w, d = driven(workload, residency_capacity_tokens=BLOCK * 40)
    earn(w, d, "rt", 0.5)
    paused(w, "t", 1.0, finish="tool_calls")  # a natural tool_resume candidate
    d.submit([Hint("tool_started", "t"), Hint("fanout", "t", branches=3)], "rt", 1.2)
    evict_all(w, 1.3)
    assert d.submit([Hint("session_ended", "t")], "rt", 1.4) == [ACCEPTED]
    assert ("", "t") not in w.policy.sessions.sessions and not d.plans
    assert d.released_sessions == 1 and d.released_tokens == (ANCHOR + 1) * BLOCK
    w.policy.planner._last_sweep = float("-inf")  # a sweep would look at every paused session
    w.policy.config = w.policy.planner.cfg = w.policy.config.with_overrides(sweep_interval_s=0.0)
    assert not w.policy.plan(1.6)


def settle(book: TrustBook, check, score: float) -> None:
    book.close(check, score, 0.0)
    book.release(check)  # (the CheckBook does this when a check leaves it)


def test_a_lying_source_stops_driving_actions_within_n_hints():
    cfg = HintConfig()
    n_pred, n_fact = ignore_bound(cfg, PREDICTION), ignore_bound(cfg, FACT)
    assert (n_pred, n_fact, ignore_bound(cfg, "session_ended")) == (7, 14, 7)  # documented in core/hints.py
    book = TrustBook(cfg)
    now = 0.0
    for _ in range(50):  # the best possible record first
        book.admit("liar", "next_agent", now)
        settle(book, book.open_check("liar", "next_agent", PREDICTION, now, now + 1), 1.0)
        book.admit("liar", "tool_started", now)
        settle(book, book.open_check("liar", "tool_started", FACT, now, now + 1), 1.0)
    acted_pred = acted_fact = 0
    for _ in range(40):  # then nothing but lies
        if book.admit("liar", "next_agent", now) == ACCEPTED:
            acted_pred += 1
        settle(book, book.open_check("liar", "next_agent", PREDICTION, now, now + 1), 0.0)
        if book.admit("liar", "tool_started", now) == ACCEPTED:
            acted_fact += 1
        settle(book, book.open_check("liar", "tool_started", FACT, now, now + 1), 0.0)
    assert 0 < acted_pred <= n_pred and 0 < acted_fact <= n_fact


def test_a_tool_started_whose_session_never_resumes_lowers_standing(workload):
    w, d = driven(workload)
    paused(w, "ghost", 1.0)
    d.submit([Hint("tool_started", "ghost")], "rt", 1.0)
    before = d.trust.weight("rt", FACT)
    d.candidates(1.0 + d.cfg.resume_horizon_s + 1)  # the deadline passes on a plan
    assert d.trust.weight("rt", FACT) < before and not d.checks.watches


def test_a_lying_session_ended_is_refuted_when_the_session_comes_back(workload):
    w, d = driven(workload)
    paused(w, "back", 1.0)
    d.submit([Hint("session_ended", "back")], "rt", 1.1)
    w.step(0, "back", 2.0)
    d.observe("", "back", None, None, 2.0)
    assert d.trust.sources["rt"].kinds["session_ended"].score == 0.0
    assert d.trust.weight("rt", FACT) < 1 / 3


def test_directives_only_from_listed_sources_and_within_the_cache_share(workload):
    w, d = driven(workload, residency_capacity_tokens=BLOCK * 200)
    paused(w, "pinme", 1.0)
    hints = [Hint("pin", "pinme", ttl_s=60)]
    assert d.refused(hints, "stranger") == [0] and d.refused(hints, "op") == []
    assert d.submit(hints, "stranger", 1.5) == [REFUSED] and not d.pins
    assert d.submit(hints, "op", 1.5) == [ACCEPTED]
    w.policy.residency.touch(w.policy.sessions.sessions[("", "pinme")].hashes, (BLOCK,) * (ANCHOR + 1), 0)
    cands = d.candidates(2.0)
    assert [c.kind for c in cands] == ["pin"]
    d.cfg = d.trust.cfg = HintConfig(directive_sources=frozenset({"op"}), directive_cache_share=0.01)
    assert not d.candidates(4.0)  # 9 blocks > 1% of 200 blocks: over the cap
    assert not d.candidates(1.5 + 61)  # TTL over
    assert not d.pins


def test_source_ids_are_hashes_and_the_key_wins():
    a = source_id(api_key="sk-secret")
    assert a.startswith("k") and "secret" not in a and len(a) == 13
    assert source_id(api_key="sk-secret", source="x") != a
    assert source_id(source="planner").startswith("s") and source_id() == "anonymous"


def test_memory_is_bounded():
    cfg = HintConfig(max_sources=8, max_pending=16)
    book = TrustBook(cfg)
    checks = CheckBook(book)
    for i in range(100):
        book.admit(f"s{i}", "tool_started", float(i))
        checks.watch(("", "", f"x{i}"), f"s{i}", "tool_started", FACT, float(i), float(i) + 1, 0)
    assert len(book.sources) == 8 and book.pending <= 16
    assert book.pending == checks.recount() == sum(len(v) for v in checks.by_source.values())


@pytest.mark.parametrize("kind", ["tool_started", "tool_finished", "fanout", "session_ended", "next_agent"])
def test_hints_without_a_known_session_are_counted_but_act_on_nothing(workload, kind):
    w, d = driven(workload)
    assert d.submit([Hint(kind, "nope", agent="a")], "rt", 1.0)[0] in (ACCEPTED, IGNORED_STANDING)
    assert not w.policy.plan(1.1)
