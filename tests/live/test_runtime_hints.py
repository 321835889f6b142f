"""Runtime hints on real sockets: client → proxy → simulated engine, hints over
`POST /v1/cachescout/hints` and on forwarded requests. Each hint kind changes the planner's
actions as documented (docs/hints.md); a lying source stops driving actions within N hints;
directives from unlisted sources are refused; unknown fields reach the engine untouched."""

from __future__ import annotations

import contextlib
import json
import time

import httpx
import pytest

from proxy.core.hints import HintConfig, ignore_bound, source_id
from proxy.harness.proxy_server import run_proxy_server
from proxy.harness.sim_server import run_sim_server
from proxy.harness.uvicorn_thread import serve_in_thread
from proxy.simengine.server import create_sim_app

from .conftest import MODEL, agent_prompts, proxy_settings, sim_config
from .conftest import chat as _chat

pytestmark = pytest.mark.sockets
CAPACITY = 64
OVERRIDES = {"cooldown_s": 0.0}
PROMPTS = agent_prompts(4, 120)


RUNTIME = {"authorization": "Bearer runtime-key"}  # model calls and hints share the runtime's key
OPERATOR = {"authorization": "Bearer operator-key"}


def chat(http, url, system, history, session, salt=None, headers=None):
    """A model call with the runtime's key (hints are scoped to the credential of the calls)."""
    return _chat(http, url, system, history, session, salt, {**RUNTIME, **(headers or {})})


@contextlib.contextmanager
def stack(**settings):
    with (
        run_sim_server(sim_config(capacity_blocks=CAPACITY)) as sim,
        run_proxy_server(proxy_settings(sim.url, policy_overrides=OVERRIDES, **settings)) as px,
    ):
        yield sim, px


def hints(http: httpx.Client, px, *items, headers: dict | None = None) -> httpx.Response:
    return http.post(px.url + "/v1/cachescout/hints", json={"hints": list(items)}, headers=headers or RUNTIME)


def settled_actions(px) -> list[dict]:
    px.call(lambda: px.live.settle(5.0))
    return list(px.live.executor.recent)


def flush(http, px, tag: str) -> None:
    """Other agents' traffic that pushes everything else out of the 64-block cache."""
    for i, name in enumerate("CD"):
        chat(http, px.url, PROMPTS[name], [{"role": "user", "content": f"{tag} other {i}"}], f"{tag}-other{i}")


def reasons(actions, since: int = 0) -> list[str]:
    return [a["reason"] for a in actions[since:] if a["outcome"] == "ok"]


@pytest.mark.parametrize("kind", ["tool_started", "tool_finished", "fanout"])
def test_session_facts_keep_the_sessions_context(http, kind):
    extra = {"tool_started": {"expected_duration_ms": 800}, "tool_finished": {}, "fanout": {"branches": 2}}[kind]
    want = "fanout" if kind == "fanout" else "tool_resume"
    with stack() as (_, px):
        chat(http, px.url, PROMPTS["A"], [{"role": "user", "content": "task"}], "s1")  # ends in "stop"
        flush(http, px, "x")
        before = settled_actions(px)
        assert want not in reasons(before)  # nothing of the kind without the hint
        r = hints(http, px, {"type": kind, "session_id": "s1", **extra})
        assert r.status_code == 200, r.text
        assert r.json()["results"] == [{"index": 0, "type": kind, "outcome": "accepted"}]
        after = settled_actions(px)
        assert want in reasons(after, len(before)), after
        state = http.get(px.url + "/debug/state", headers={"x-admin-token": "admin-secret"}).json()
        src = source_id(api_key="runtime-key")
        assert state["hints"]["sources"][src]["kinds"][kind]["acted"] == 1


def test_next_agent_warms_the_named_agent_once_the_source_has_earned_it(http):
    with stack() as (_, px):
        named = {"X-CacheScout-Agent": "coder"}
        chat(http, px.url, PROMPTS["B"], [{"role": "user", "content": "warm up"}], "x", headers=named)
        chat(http, px.url, PROMPTS["A"], [{"role": "user", "content": "plan"}], "s")
        r = hints(http, px, {"type": "next_agent", "session_id": "s", "agent": "coder", "probability": 1.0})
        assert r.json()["results"][0]["outcome"] == "ignored_standing"  # a new source: predictions not yet
        chat(http, px.url, PROMPTS["B"], [{"role": "user", "content": "code"}], "s", headers=named)  # it came true
        flush(http, px, "y")
        before = settled_actions(px)
        r = hints(http, px, {"type": "next_agent", "session_id": "s", "agent": "coder", "probability": 1.0})
        assert r.json()["results"][0]["outcome"] == "accepted"
        after = settled_actions(px)
        assert "transition" in reasons(after, len(before)), after


def test_session_ended_stops_every_protective_action_at_once(http):
    with stack() as (_, px):
        chat(http, px.url, PROMPTS["B"], [{"role": "user", "content": "earn"}], "earn")
        chat(http, px.url, PROMPTS["B"], [{"role": "user", "content": "done"}], "done")
        r = hints(http, px, {"type": "session_ended", "session_id": "done"})
        assert r.json()["results"][0]["outcome"] == "ignored_standing"  # a new source releases nothing yet
        hints(http, px, {"type": "tool_started", "session_id": "earn"})
        chat(http, px.url, PROMPTS["B"], [{"role": "user", "content": "earned"}], "earn")  # the fact came true
        chat(http, px.url, PROMPTS["A"], [{"role": "user", "content": "task"}], "gone")
        hints(http, px, {"type": "tool_started", "session_id": "gone"})
        r = hints(http, px, {"type": "session_ended", "session_id": "gone"})
        assert r.json()["results"][0]["outcome"] == "accepted"
        settled_actions(px)
        pol = px.live.policy
        assert ("", "gone") not in pol.sessions.sessions and not px.live.hints.driver.plans
        flush(http, px, "z")
        before = settled_actions(px)
        time.sleep(0.5)  # plan ticks and sweeps run meanwhile
        after = settled_actions(px)
        assert "tool_resume" not in reasons(after, len(before))
        metrics = http.get(px.url + "/metrics").text
        released = [ln for ln in metrics.splitlines() if ln.startswith("cachescout_hint_released_tokens_total ")]
        assert released and float(released[0].split()[-1]) > 0


def test_a_lying_source_stops_driving_actions_within_n_hints(http):
    n = ignore_bound(HintConfig())
    liar = {**RUNTIME, "X-CacheScout-Source": "flaky-planner"}
    with stack() as (_, px):
        names = {"B": {"X-CacheScout-Agent": "coder"}, "A": {"X-CacheScout-Agent": "planner"}}
        turn = 0

        def round_(said: str, came: str) -> str:
            nonlocal turn
            turn += 1
            out = hints(http, px, {"type": "next_agent", "session_id": "L", "agent": said}, headers=liar)
            chat(http, px.url, PROMPTS[came], [{"role": "user", "content": f"turn {turn}"}], "L", headers=names[came])
            return out.json()["results"][0]["outcome"]

        chat(http, px.url, PROMPTS["C"], [{"role": "user", "content": "hello"}], "pre")  # the key is accepted
        round_("coder", "B")  # names bound, first check
        for _ in range(12):
            round_("coder", "B")  # truthful: the best standing it can get
        lies = [round_("coder", "A") for _ in range(n + 5)]  # then it lies every time
        acted = lies.count("accepted")
        assert 0 < acted <= n, lies
        assert lies[-5:] == ["ignored_standing"] * 5
    metrics_src = source_id(api_key="runtime-key", source="flaky-planner")[:9]
    assert metrics_src.startswith("k")


def test_directives_need_an_operator_listed_source(http):
    op = source_id(api_key="operator-key")
    with stack(hints_directive_sources=op) as (_, px):
        chat(http, px.url, PROMPTS["A"], [{"role": "user", "content": "keep me"}], "keep", headers=OPERATOR)
        chat(http, px.url, PROMPTS["B"], [{"role": "user", "content": "mine"}], "other")  # the runtime's key
        r = hints(http, px, {"type": "pin", "session_id": "keep", "ttl_s": 60})
        assert r.status_code == 403
        err = r.json()["error"]
        assert err["type"] == "permission_error" and err["code"] == "directive_not_allowed"
        assert "CACHESCOUT_HINTS_DIRECTIVE_SOURCES" in err["message"] and not px.live.hints.driver.pins
        r = hints(http, px, {"type": "pin", "session_id": "keep", "ttl_s": 60}, headers=OPERATOR)
        assert r.status_code == 200 and r.json()["results"][0]["outcome"] == "accepted"
        assert len(px.live.hints.driver.pins) == 1


def test_a_listed_pin_becomes_a_retain_on_a_priority_engine(http):
    op = source_id(api_key="operator-key")
    overrides = {**OVERRIDES, "retain_enabled": True}
    with (
        run_sim_server(sim_config(capacity_blocks=2048, eviction="priority")) as sim,  # 10%: room for the pin
        run_proxy_server(proxy_settings(sim.url, policy_overrides=overrides, hints_directive_sources=op)) as px,
    ):
        chat(http, px.url, PROMPTS["A"], [{"role": "user", "content": "keep me"}], "keep", headers=OPERATOR)
        before = settled_actions(px)
        assert "hint" not in reasons(before)
        r = hints(http, px, {"type": "pin", "session_id": "keep", "ttl_s": 60}, headers=OPERATOR)
        assert r.json()["results"][0]["outcome"] == "accepted"
        after = settled_actions(px)
        pinned = [a for a in after[len(before) :] if a["reason"] == "hint" and a["outcome"] == "ok"]
        assert pinned and pinned[0]["kind"] == "retain", after


def test_bad_hints_get_openai_style_errors_and_apply_nothing(http):
    with stack(hints_max_body_bytes=1024) as (_, px):
        r = hints(http, px, {"type": "tool_started", "session_id": "a"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"  # no accepted call yet
        chat(http, px.url, PROMPTS["A"], [{"role": "user", "content": "hello"}], "a")
        r = http.post(px.url + "/v1/cachescout/hints", content=b"{not json", headers=RUNTIME)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        r = hints(http, px, {"type": "tool_started", "session_id": "a"}, {"type": "teleport"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "hints[1].type"
        assert not px.live.hints.driver.trust.sources  # the valid first hint was not applied
        r = http.post(px.url + "/v1/cachescout/hints", content=b"[" + b" " * 2000 + b"]", headers=RUNTIME)
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        r = hints(http, px, {"type": "fanout", "session_id": "a"})
        assert r.status_code == 400 and "branches" in r.json()["error"]["message"]


@contextlib.contextmanager
def capturing_sim(seen: list[bytes]):
    """The simulated engine behind an ASGI wrapper that records every chat body as it arrived."""
    app = create_sim_app(sim_config(capacity_blocks=CAPACITY))

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            return await app(scope, receive, send)
        chunks: list[bytes] = []

        async def rcv():
            msg = await receive()
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                seen.append(b"".join(chunks))
            return msg

        return await app(scope, rcv, send)

    with serve_in_thread(wrapped, name="capturing sim", startup_timeout=10.0, shutdown_timeout=10.0) as srv:
        yield f"http://127.0.0.1:{srv.port}"


def test_hint_fields_are_read_and_forwarded_untouched_with_the_openai_sdk():
    openai = pytest.importorskip("openai")
    seen: list[bytes] = []
    extra = {
        "agent_hints": {"agent_id": "researcher", "expected_tool_duration_ms": 900, "future_field": [1]},
        "nvext": {"agent_hints": {"osl": 64, "speculative_prefill": True}, "unknown_ext": {"a": 1}},
        "metadata": {"session_id": "sdk-1"},
    }
    with capturing_sim(seen) as url, run_proxy_server(proxy_settings(url)) as px:
        client = openai.OpenAI(base_url=px.url + "/v1", api_key="client-key")
        client.chat.completions.create(
            model=MODEL,
            max_tokens=8,
            messages=[{"role": "system", "content": PROMPTS["A"]}, {"role": "user", "content": "go"}],
            extra_headers={"X-CacheScout-Agent": "researcher"},
            extra_body=extra,
        )
        px.call(lambda: px.live.settle(5.0))
        from proxy.runtime.hint_inputs import principal_of

        names = px.live.hints.driver.scope.named("", principal_of({"authorization": "Bearer client-key"}))
    got = json.loads(seen[0])
    for key, value in extra.items():
        assert got[key] == value  # every field, known or not, as sent
    assert "researcher" in names


def test_strip_fields_is_opt_in_and_keeps_other_nvext_keys():
    seen: list[bytes] = []
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
        "agent_hint": {"session_id": "q"},
        "nvext": {"agent_hints": {"osl": 8}, "keep": 1},
    }
    with capturing_sim(seen) as url, run_proxy_server(proxy_settings(url, hints_strip_fields=True)) as px:
        httpx.post(px.url + "/v1/chat/completions", json=body, timeout=20).raise_for_status()
    got = json.loads(seen[0])
    assert "agent_hint" not in got and got["nvext"] == {"keep": 1} and got["messages"] == body["messages"]
