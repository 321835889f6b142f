"""Learn only from what the engine accepted: the same traffic that makes the policy act when the
engine answers 200 produces nothing at all when it answers 4xx/5xx (issue 13)."""

from __future__ import annotations

import json

import pytest

from proxy.contracts import RequestContext
from proxy.core import PolicyConfig, ScoutPolicy
from proxy.runtime.live_policy import LivePolicyObserver

SYSTEM = "You are the planner agent. " * 40


class Recorder:
    sending = 0

    def __init__(self) -> None:
        self.actions: list = []

    def submit(self, actions) -> int:
        self.actions.extend(actions)
        return len(actions)


def sse_tool_call() -> bytes:
    frames = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                        ]
                    },
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 500, "completion_tokens": 3}},
    ]
    return b"".join(b"data: " + json.dumps(f).encode() + b"\n\n" for f in frames) + b"data: [DONE]\n\n"


def drive(status: int, n: int = 12) -> tuple[LivePolicyObserver, Recorder]:
    cfg = PolicyConfig(
        r_min=0.0,
        r_min_transitions=0,
        cooldown_s=0.0,
        residency_capacity_tokens=400,
        residency_stride=1,
        tool_resume_min_p=0.1,
    )
    obs = LivePolicyObserver(ScoutPolicy(cfg), None, lambda: 0.0, defer=False)
    rec = Recorder()
    obs.executor = rec
    now = 0.0
    for k in range(n):
        body = json.dumps(
            {
                "model": "m",
                "user": f"s{k % 3}",
                "stream": True,
                "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"step {k} " * 30}],
            }
        ).encode()
        ctx = RequestContext(
            k, "POST", "/v1/chat/completions", {"authorization": "Bearer x"}, body, json.loads(body), now
        )
        obs.on_request(ctx)
        ctype = "text/event-stream" if status == 200 else "application/json"
        obs.on_response_start(ctx, status, {"content-type": ctype}, now + 0.01)
        if status == 200:
            obs.on_response_chunk(ctx, sse_tool_call(), now + 0.02)
        else:
            obs.on_response_chunk(ctx, b'{"error":{"message":"no"}}', now + 0.02)
        obs.on_response_end(ctx, None, now + 0.03)
        now += 1.0
        obs.plan(now)
    return obs, rec


def test_accepted_traffic_does_drive_actions():
    obs, rec = drive(200)
    assert obs.counts["observed"] == 12 and rec.actions  # (so the next test can fail)


@pytest.mark.parametrize("status", [400, 401, 403, 429, 500, 503])
def test_rejected_traffic_never_produces_an_action(status):
    obs, rec = drive(status)
    assert rec.actions == []
    assert obs.counts["observed"] == 0 and obs.counts["rejected"] == 12
    assert len(obs.policy.agents) == 0 and len(obs.policy.sessions) == 0


def test_auth_allow_list():
    import hashlib

    obs2 = LivePolicyObserver(ScoutPolicy(), None, lambda: 0.0, defer=False)
    obs2.allowed_auth = frozenset({hashlib.sha256(b"Bearer x").hexdigest()})
    ctx = RequestContext(1, "POST", "/v1/chat/completions", {"authorization": "Bearer y"}, b"{}", {}, 0.0)
    obs2.on_request(ctx)
    assert obs2.counts["not_allowed"] == 1
    ctx = RequestContext(2, "POST", "/v1/chat/completions", {"authorization": "Bearer x"}, b"{}", {}, 0.0)
    obs2.on_request(ctx)
    assert obs2.counts["not_allowed"] == 1
