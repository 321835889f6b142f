"""The close decision for SGLang's session radix cache (proxy/core/session_close.py)."""

from __future__ import annotations

import pytest

from proxy.core.session_close import CloseParams, SessionCloser, quantile

P = CloseParams(quantile=0.5, min_samples=2, default_idle_s=100.0, min_idle_s=1.0, max_idle_s=1000.0)


def test_plain_stop_then_idle_past_the_default():
    c = SessionCloser(P)
    c.on_request("s", 0.0)
    c.on_response("s", "stop", False, 1.0)
    assert not c.finished("s", 100.0)  # exactly the limit: not past it
    assert c.finished("s", 101.5)
    assert c.due(101.5) == ["s"]


@pytest.mark.parametrize(("reason", "tools"), [("tool_calls", True), ("stop", True), ("length", False), (None, False)])
def test_never_after_a_tool_call_a_length_cut_or_an_error(reason, tools):
    c = SessionCloser(P)
    c.on_request("s", 0.0)
    c.on_response("s", reason, tools, 1.0)
    assert not c.finished("s", 1e9) and c.due(1e9) == []


def test_never_with_a_request_in_flight():
    c = SessionCloser(P)
    c.on_request("s", 0.0)
    c.on_request("s", 0.5)  # a second request (fan-out) still running
    c.on_response("s", "stop", False, 1.0)
    assert not c.finished("s", 1e9)
    c.on_response("s", "stop", False, 2.0)
    assert c.finished("s", 200.0)


def test_learned_think_time_replaces_the_default():
    c = SessionCloser(P)
    t = 0.0
    for gap in (10.0, 20.0, 30.0):
        c.on_request("s", t)
        c.on_response("s", "stop", False, t + 1)
        t = t + 1 + gap
    c.on_request("s", t)
    c.on_response("s", "stop", False, t + 1)
    assert c.idle_limit("s") == 20.0  # median of 10, 20, 30
    assert not c.finished("s", t + 1 + 19.0) and c.finished("s", t + 1 + 21.0)


def test_a_new_session_uses_the_pooled_think_times():
    c = SessionCloser(P)
    for sid, gap in (("a", 4.0), ("b", 6.0)):
        c.on_request(sid, 0.0)
        c.on_response(sid, "stop", False, 1.0)
        c.on_request(sid, 1.0 + gap)
    c.on_request("new", 50.0)
    c.on_response("new", "stop", False, 51.0)
    assert c.idle_limit("new") == 4.0  # pooled median (nearest rank) of 4, 6


def test_gap_after_a_tool_call_is_not_a_think_time():
    c = SessionCloser(P)
    c.on_request("s", 0.0)
    c.on_response("s", "tool_calls", True, 1.0)
    c.on_request("s", 500.0)
    c.on_response("s", "stop", False, 501.0)
    assert c.idle_limit("s") == 100.0  # nothing learned: the default


def test_clamped_and_closed_forgets():
    c = SessionCloser(CloseParams(quantile=1.0, min_samples=1, min_idle_s=5.0, max_idle_s=50.0))
    c.on_request("s", 0.0)
    c.on_response("s", "stop", False, 1.0)
    c.on_request("s", 1.5)  # a 0.5 s think time: clamped up to 5 s
    c.on_response("s", "stop", False, 2.0)
    assert c.idle_limit("s") == 5.0
    assert c.next_due(2.0) == 7.0
    c.closed("s")
    assert len(c) == 0 and c.due(1e9) == []


def test_bounded_sessions():
    c = SessionCloser(CloseParams(max_sessions=3))
    for i in range(5):
        c.on_request(f"s{i}", float(i))
    assert len(c) == 3 and c.dropped == 2


def test_quantile_nearest_rank():
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.95) == 4.0
    assert quantile([5.0], 0.1) == 5.0


def test_bad_params():
    with pytest.raises(ValueError):
        CloseParams(quantile=0.0)
    with pytest.raises(ValueError):
        CloseParams(min_idle_s=10.0, max_idle_s=1.0)
