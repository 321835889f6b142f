"""Priority lanes on real sockets, against a fake engine that knows about `priority`
(`priority_upstream.py`): the adapter's probe, warmups at the lowest priority, the session lane's
rewrite (and its absence without a priority policy), and the engine's own load read from /metrics."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from proxy.core.action_payload import ActionPayload
from proxy.core.actions import Action
from proxy.engines.base import CAP_SCHED_PRIORITY, LANE_LOWEST
from proxy.harness.proxy_server import run_proxy_server
from proxy.harness.uvicorn_thread import serve_in_thread

from .conftest import proxy_settings
from .priority_upstream import build_app, recorded

pytestmark = pytest.mark.sockets
SYSTEM = "You are a careful planner. " + " ".join(f"rule{k} holds" for k in range(60))


@contextlib.contextmanager
def upstream(**kw) -> Iterator[str]:
    with serve_in_thread(build_app(**kw), name="priority upstream") as srv:
        yield f"http://127.0.0.1:{srv.port}"


def log_of(url: str) -> list[dict]:
    return httpx.get(url + "/_control/log").json()


def body(session: str, turns: int) -> dict:
    msgs = [{"role": "system", "content": SYSTEM}]
    for i in range(turns):
        msgs += [{"role": "user", "content": f"step {i} of {session}"}, {"role": "assistant", "content": "ok"}]
    msgs.append({"role": "user", "content": f"step {turns} of {session}"})
    return {"model": "fake-prio", "messages": msgs, "max_tokens": 4}


def post(http: httpx.Client, url: str, payload: dict | bytes, session: str | None = None) -> None:
    content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {"content-type": "application/json", **({"x-session-id": session} if session else {})}
    r = http.post(url + "/v1/chat/completions", content=content, headers=headers)
    assert r.status_code == 200, r.text


def warm_now(px) -> None:
    """One warmup through the proxy's own adapter (the executor's path to the engine)."""
    payload = ActionPayload({"kind": "chat", "model": "fake-prio", "messages": [{"role": "system", "content": SYSTEM}]})
    action = Action("warm", "transition", "", "anchor1", (1, 2), 32, payload, 80, time.monotonic(), 1e12)
    result = px.call(lambda: px.live.adapter.warm(action))
    assert result.ok, result


def test_priority_engine_slack_lane_and_continue_session_lane(http):
    with upstream(policy="priority", server_info=True) as url:
        settings = proxy_settings(url, engine="vllm", session_priority="continue")
        with run_proxy_server(settings) as px:
            engine = http.get(px.url + "/debug/engine", headers={"authorization": "Bearer admin-secret"}).json()
            assert CAP_SCHED_PRIORITY in engine["capabilities"]
            assert engine["scheduling"]["policy"] == "priority" and engine["scheduling"]["lane_priority"] == LANE_LOWEST
            post(http, px.url, body("s1", 0), "s1")
            px.call(lambda: px.live.settle(5.0))
            time.sleep(0.35)
            post(http, px.url, body("s2", 0), "s2")
            px.call(lambda: px.live.settle(5.0))
            time.sleep(0.35)
            post(http, px.url, body("s1", 1), "s1")  # s1's later call: ahead of s2's
            own = json.dumps({**body("s3", 0), "priority": 7}, indent=1).encode()  # odd spacing on purpose
            post(http, px.url, own, "s3")
            warm_now(px)
            lane = http.get(px.url + "/debug/engine", headers={"authorization": "Bearer admin-secret"}).json()
        log = log_of(url)
    chats = recorded(log, "/v1/chat/completions")
    prios = [json.loads(raw).get("priority") for _, raw in chats]
    s1a, s2a, s1b, s3 = prios[:4]
    assert all(isinstance(p, int) for p in (s1a, s2a, s1b))
    assert s1a < s2a and s1b < s2a and abs(s1b - s1a) <= 1, prios  # program-level FCFS
    assert s2a - s1a >= 3  # 0.35 s apart in 0.1 s ticks
    assert chats[3][1] == own and s3 == 7  # a client's own priority: the bytes as sent
    warms = [json.loads(raw) for _, raw in recorded(log, "/v1/completions") if json.loads(raw).get("max_tokens") == 1]
    assert warms and warms[-1]["priority"] == LANE_LOWEST  # the slack lane: lowest priority (vLLM: largest)
    assert lane["session_lane"]["mode"] == "continue" and lane["session_lane"]["active"] is True


@pytest.mark.parametrize("refuse", [True, False])
def test_fcfs_engine_leaves_bodies_and_warmups_alone(http, refuse):
    """No priority policy (refused: V0-style; accepted: V1 cannot be told apart): session lane asked
    for but inactive, client bytes forwarded exactly, warmups without `priority` (today's behaviour)."""
    with upstream(policy="fcfs", refuse=refuse) as url:
        with run_proxy_server(proxy_settings(url, engine="vllm", session_priority="las")) as px:
            adapter = px.live.adapter
            assert CAP_SCHED_PRIORITY not in adapter.capabilities
            assert adapter.scheduling["policy"] == ("fcfs" if refuse else "unknown")
            sent = json.dumps(body("s1", 0)).encode()
            post(http, px.url, sent, "s1")
            warm_now(px)
        log = log_of(url)
    chats = recorded(log, "/v1/chat/completions")
    assert chats[-1][1] == sent
    warm = [json.loads(raw) for _, raw in recorded(log, "/v1/completions") if json.loads(raw).get("max_tokens") == 1]
    assert "priority" not in warm[-1]


def test_operator_on_turns_the_lane_on_where_it_cannot_be_probed(http):
    with upstream(policy="priority", refuse=False) as url:  # no /server_info: vLLM V1 without dev mode
        with run_proxy_server(proxy_settings(url, engine="vllm", engine_priority_scheduling="on")) as px:
            assert px.live.adapter.priority_lane
            warm_now(px)
        log = log_of(url)
    warm = [json.loads(raw) for _, raw in recorded(log, "/v1/completions") if json.loads(raw).get("max_tokens") == 1]
    assert warm[-1]["priority"] == LANE_LOWEST


def test_engine_load_from_other_clients_stops_actions_without_the_lane(http):
    """Another client loads the engine directly: its gauges show requests the proxy did not send, so
    the planner stands back (no slack lane) instead of inferring idleness from its own traffic."""
    with upstream(policy="fcfs") as url:
        with run_proxy_server(proxy_settings(url, engine="vllm")) as px:
            post(http, px.url, body("s1", 0), "s1")

            def shared() -> int:  # Planner.skipped is a snapshot (derived from the per-piece counts): read anew
                return px.call(lambda: px.live.policy.planner.skipped["tick_engine_shared"])

            assert px.call(lambda: px.live.scraper.external) == 0
            httpx.post(url + "/_control/load", json={"running": 3, "waiting": 1})
            time.sleep(0.6)  # scrapes every 0.1 s: two of them see the load
            assert px.call(lambda: px.live.scraper.external) == 4
            before = shared()
            time.sleep(0.3)
            assert shared() > before
            httpx.post(url + "/_control/load", json={"running": 0, "waiting": 0})
            time.sleep(0.6)
            assert px.call(lambda: px.live.scraper.external) == 0
            after = shared()
            time.sleep(0.3)
            assert shared() == after


def test_the_simulator_reports_its_scheduling_policy(http):
    """The sim adapter reads the `scheduling_policy` label of the simulator's cache_config_info. The
    simulator's priority scheduling arrives with issue 21's engine (`SimConfig.scheduling_policy`);
    until then it runs FCFS and says so."""
    from dataclasses import fields

    from proxy.harness.sim_server import run_sim_server
    from proxy.simengine.service import SimConfig

    from .conftest import sim_config

    cases = [("fcfs", {}, None)]
    if "scheduling_policy" in {f.name for f in fields(SimConfig)}:
        cases += [
            ("priority", {"scheduling_policy": "priority"}, LANE_LOWEST),  # vLLM's: lower runs first
            ("sglang", {"scheduling_policy": "sglang"}, -LANE_LOWEST),  # SGLang's: higher runs first
        ]
    for policy, extra, lane in cases:
        with run_sim_server(sim_config(**extra)) as sim, run_proxy_server(proxy_settings(sim.url)) as px:
            adapter = px.live.adapter
            assert adapter.name == "sim"
            assert adapter.scheduling["policy"] == ("fcfs" if lane is None else "priority")
            assert adapter.scheduling["source"] == f"sim cache_config_info {policy}"
            assert adapter.lane_priority() == lane
