"""A session's pause is its latest request's (issue 21: the harm in coding-agent slow × 2).

When an earlier request of a session ends after a later one was sent (parallel calls, a retry, an
open-loop replay under queueing), the session must not take that earlier answer's finish, end or
payload: a `stop` answer ending late turned the tool pause after a later `tool_calls` into a
learned `stop` gap of a minute, and with such samples the session sweep kept touching the contexts
of sessions that had ended (docs/results/replay-capture.md)."""

from __future__ import annotations

from proxy.core import ResponseOutcome, ScoutPolicy

from .conftest import Workload


def _agent_known(w: Workload) -> None:
    for k in range(3):  # an agent is found when its anchor recurs
        w.step(1, f"other{k}", float(k), "stop")


def test_an_earlier_answer_ending_late_does_not_take_over_the_pause():
    p = ScoutPolicy()
    w = Workload(p)
    _agent_known(w)
    b = p.observe_request(w.view(1, "s"), 10.0)  # answered with `stop`, late
    c = p.observe_request(w.view(1, "s"), 11.0)  # sent while b runs; answered with `tool_calls`
    p.observe_response(c.request_id, ResponseOutcome("tool_calls", assistant_payload={"turn": "c"}), 11.5)
    p.observe_response(b.request_id, ResponseOutcome("stop", assistant_payload={"turn": "b"}), 12.0)
    s = next(x for x in p.sessions.sessions.values() if x.run == "s")
    assert s.inflight == 0
    assert s.finish == "tool_calls" and s.last_end == 11.5
    assert s.assistant_payload == {"turn": "c"}  # the answer to the prompt in s.hashes
    agent = s.agent
    assert agent is not None
    stop_gaps = list(agent.gaps)
    p.observe_request(w.view(1, "s"), 60.0)  # the tool's answer, 48.5 s after c's end
    assert list(agent.tool_gaps)[-1] == 60.0 - 11.5
    assert list(agent.gaps) == stop_gaps  # not learned as a pause after a plain stop


def test_answers_in_order_are_unchanged():
    p = ScoutPolicy()
    w = Workload(p)
    _agent_known(w)
    b = p.observe_request(w.view(1, "s"), 10.0)
    c = p.observe_request(w.view(1, "s"), 11.0)
    p.observe_response(b.request_id, ResponseOutcome("stop"), 11.2)
    s = next(x for x in p.sessions.sessions.values() if x.run == "s")
    assert s.inflight == 1 and s.last_end is None  # b was not the latest: no pause yet
    p.observe_response(c.request_id, ResponseOutcome("tool_calls"), 11.5)
    assert (s.inflight, s.finish, s.last_end) == (0, "tool_calls", 11.5)
