"""The Responses API (and Anthropic Messages) through the proxy to the simulated engine, on real
sockets: the same 3-agent workflow as tests/live/test_acceptance.py, sent as `/v1/responses`
(instructions + input items), is learned and warmed like its chat-completions twin; the warmups
(chat `/tokenize` of the converted messages, then token ids) hit exactly the engine's tokens."""

from __future__ import annotations

import httpx
import pytest

from proxy.harness.proxy_server import run_proxy_server
from proxy.harness.sim_server import run_sim_server

from .conftest import MODEL, engine_hits, proxy_settings, sim_config
from .test_acceptance import CAPACITY, FAST, ORDER, PROMPTS, debug, settle, workflow

pytestmark = pytest.mark.sockets


def responses_workflow(http: httpx.Client, url: str, sessions: int, px, steps: int = 6) -> list[dict]:
    out = []
    for s in range(sessions):
        items = [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": f"task s{s}: " + " ".join(f"w{s}x{k}" for k in range(30))}],
            }
        ]
        for step in range(steps):
            agent = ORDER[step % len(ORDER)]
            settle(px)
            body = {
                "model": MODEL,
                "instructions": PROMPTS[agent],
                "input": items,
                "max_output_tokens": 8,
                "user": f"s{s}",
            }
            r = http.post(url + "/v1/responses", json=body)
            assert r.status_code == 200, r.text
            j = r.json()
            usage = j["usage"]
            out.append(
                {
                    "session": s,
                    "agent": agent,
                    "prompt": usage["input_tokens"],
                    "cached": usage["input_tokens_details"]["cached_tokens"],
                }
            )
            reply = j["output"][0]["content"][0]["text"]
            items.append({"type": "message", "role": "user", "content": f"{agent}: {reply}"})
    settle(px)
    return out


def run(kind: str):
    with run_sim_server(sim_config(capacity_blocks=CAPACITY)) as sim, httpx.Client(timeout=20) as http:
        with run_proxy_server(proxy_settings(sim.url, policy_overrides=FAST)) as px:
            if kind == "responses":
                records = responses_workflow(http, px.url, 6, px)
            else:
                records = workflow(http, px.url, sessions=6, px=px)
            assert px.call(lambda: px.live.quiesce(5.0))
            return {
                "records": records,
                "state": debug(http, px),
                "engine_hits": engine_hits(sim.url),
                "client_cached": px.live.observer.counts["cached_tokens"],
                "warm_cached": px.live.executor.stats["warm_cached_tokens"],
                "warm_ok": debug(http, px, "engine")["executor"]["ok"],
            }


@pytest.fixture(scope="module")
def twins():
    return run("chat"), run("responses")


def test_responses_workload_is_learned_and_warmed_like_its_chat_twin(twins):
    chat, resp = twins
    for r in (chat, resp):
        assert r["state"]["stats"]["agents"] == 3 and r["state"]["stats"]["gate_open"]
        assert r["warm_ok"] > 0
    # the same prompts: the same tokens reach the engine (the sim renders both through one template)
    assert [x["prompt"] for x in resp["records"]] == [x["prompt"] for x in chat["records"]]
    anchor = min(x["prompt"] for x in chat["records"]) // 2
    late = [x for x in resp["records"] if x["session"] >= 4]
    assert sum(x["cached"] >= anchor for x in late) >= 0.9 * len(late)
    assert sum(x["cached"] for x in resp["records"]) >= 0.9 * sum(x["cached"] for x in chat["records"])
    # the response tap read the Responses usage: every engine hit is a client hit or a warmup's own
    assert resp["engine_hits"] == resp["client_cached"] + resp["warm_cached"]
    assert resp["client_cached"] == sum(x["cached"] for x in resp["records"])


def test_anthropic_messages_route_and_view(http):
    with run_sim_server(sim_config()) as sim, run_proxy_server(proxy_settings(sim.url)) as px:
        for s in range(3):
            body = {
                "model": MODEL,
                "max_tokens": 8,
                "system": PROMPTS["A"],
                "metadata": {"session_id": f"m{s}"},
                "messages": [{"role": "user", "content": [{"type": "text", "text": f"question {s} " * 20}]}],
            }
            r = http.post(px.url + "/v1/messages", json=body)
            assert r.status_code == 200, r.text
            assert r.json()["type"] == "message" and r.json()["usage"]["input_tokens"] > 0
        settle(px)
        state = debug(http, px)
    assert state["observer"]["observed"] >= 3 and state["stats"]["agents"] == 1
