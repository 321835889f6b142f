"""runtime/session_lane: ranks for `continue` (program-level FCFS) and `las` (least attained
service with an ageing bound), bounded state."""

from __future__ import annotations

import pytest

from proxy.runtime.session_lane import LAS_QUANTUM_TOKENS, PRIORITY_TICK_S, SESSION_TTL_S, SessionLane

A, B = ("t", "a"), ("t", "b")


def test_continue_ranks_a_session_by_when_it_started():
    lane = SessionLane("continue", 30.0, origin=100.0)
    assert lane.rank(A, 100.0) == 0
    lane.served(A, 500, started=100.0, now=101.0)
    rb = lane.rank(B, 105.0)  # a newer session's first call: its arrival
    assert rb == round(5.0 / PRIORITY_TICK_S)
    lane.served(B, 500, started=105.0, now=106.0)
    assert lane.rank(A, 110.0) == 0 < lane.rank(B, 110.0) == rb  # A's later call goes first
    assert lane.rank(None, 110.0) == round(10.0 / PRIORITY_TICK_S)  # unattributed: FCFS


def test_continue_is_bounded_by_the_ageing_bound():
    lane = SessionLane("continue", 30.0, origin=0.0)
    lane.served(A, 500, started=0.0, now=1.0)
    assert lane.rank(A, 20.0) == 0  # within the bound: the session's start
    late = lane.rank(A, 100.0)  # 100 s after it started: at most 30 s ahead of its arrival
    assert late == round(70.0 / PRIORITY_TICK_S)
    # A's call ranks behind first calls that arrived more than 30 s before it, ahead of later ones
    assert lane.rank(B, 69.0) < late < lane.rank(B, 71.0)


def test_las_favours_less_served_sessions_within_the_ageing_bound():
    lane = SessionLane("las", 30.0, origin=0.0)
    assert lane.penalty_s(0) == 0.0
    assert lane.penalty_s(LAS_QUANTUM_TOKENS) > 0.0
    assert lane.penalty_s(10**9) == 30.0  # never ordered behind more than 30 s of later arrivals
    lane.served(A, 200_000, started=0.0, now=1.0)
    heavy, light = lane.rank(A, 10.0), lane.rank(B, 10.0)
    assert light < heavy
    # the ageing bound: a request from a heavy session still goes before anything arriving 30 s later
    assert heavy < lane.rank(B, 10.0 + 30.0 + PRIORITY_TICK_S)


def test_state_is_bounded_and_idle_sessions_start_over():
    lane = SessionLane("continue", 30.0, origin=0.0, max_sessions=3)
    for i in range(10):
        lane.served(("t", str(i)), 1, started=float(i), now=float(i))
    assert len(lane) == 3
    lane.served(A, 1, started=0.0, now=1.0)
    late = 1.0 + SESSION_TTL_S + 1.0
    assert lane.rank(A, late) == round(late / PRIORITY_TICK_S)  # forgotten: a new session


def test_off_is_not_a_lane():
    with pytest.raises(ValueError):
        SessionLane("off", 30.0, origin=0.0)
