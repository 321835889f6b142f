"""Session signals on real sockets: a streamed answer that ends in `tool_calls` marks the session as
waiting, and the proxy warms the session's full context — prompt plus the assistant tool-call turn,
reassembled from the SSE deltas — which is exactly the prefix of the resumed request."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from proxy.harness.proxy_server import run_proxy_server
from proxy.harness.sim_server import run_sim_server

from .conftest import MODEL, agent_prompts, chat, proxy_settings, sim_config

pytestmark = pytest.mark.sockets
CAPACITY = 64  # blocks of 16: the paused context plus the other traffic do not fit

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "search the web",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
]


def stream_chat(http: httpx.Client, url: str, messages: list[dict]) -> dict:
    body = {
        "model": MODEL,
        "messages": messages,
        "tools": TOOLS,
        "max_tokens": 64,
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": "sess-1",
    }
    calls: dict[int, dict] = {}
    out = {"finish": None, "usage": None}
    with http.stream("POST", url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            obj = json.loads(line[5:])
            out["usage"] = obj.get("usage") or out["usage"]
            for ch in obj.get("choices") or ():
                for tc in (ch.get("delta") or {}).get("tool_calls") or ():
                    slot = calls.setdefault(
                        tc.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                    )
                    slot["id"] = tc.get("id") or slot["id"]
                    slot["function"]["name"] += (tc.get("function") or {}).get("name") or ""
                    slot["function"]["arguments"] += (tc.get("function") or {}).get("arguments") or ""
                out["finish"] = ch.get("finish_reason") or out["finish"]
    out["tool_calls"] = [calls[i] for i in sorted(calls)]
    return out


def resume_run(http: httpx.Client, url: str, px=None, sent: list | None = None) -> tuple[dict, dict, list]:
    """Tool call, then other traffic that pushes the paused context out of a small LRU cache while
    the tool "runs", then the resume."""
    prompts = agent_prompts(3, 120)
    messages = [{"role": "system", "content": prompts["A"]}, {"role": "user", "content": "find the answer"}]
    first = stream_chat(http, url, messages)
    assert first["finish"] == "tool_calls" and first["tool_calls"]
    for i, name in enumerate("BC"):
        chat(http, url, prompts[name], [{"role": "user", "content": f"other work {i}"}], "sess-2")
    time.sleep(1.3)  # the tool runs; the planner sweeps paused sessions
    recent: list = []
    if px is not None:
        px.call(lambda: px.live.settle(5.0))
        recent = list(px.live.executor.recent)
    asst = {"role": "assistant", "content": None, "tool_calls": first["tool_calls"]}
    tool = {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "42"}
    resumed = stream_chat(http, url, [*messages, asst, tool])
    return first, resumed, recent


def test_tool_calls_pause_the_session_and_its_context_is_warmed(http):
    with run_sim_server(sim_config(tool_call_share=1.0, capacity_blocks=CAPACITY)) as sim:
        _, direct, _ = resume_run(http, sim.url)
    system = agent_prompts(1, 120)["A"]
    sent: list[dict] = []
    with run_sim_server(sim_config(tool_call_share=1.0, capacity_blocks=CAPACITY)) as sim:
        # tool_resume is not gated by R (the core's default). The 64-block cache is tiny by design:
        # the paused context is ~35% of it, warmed with the default policy (no cache-share limit since
        # issue 26 removed warm_max_cache_share)
        overrides = {"cooldown_s": 0.0}
        with run_proxy_server(proxy_settings(sim.url, policy_overrides=overrides)) as px:
            adapter = px.live.adapter
            original = adapter.post_json

            async def spy(path, body, *, warmup=True, **kw):  # kw: routing, extra_headers
                sent.append({"path": path, **body, "_routing": kw.get("routing")})
                return await original(path, body, warmup=warmup, **kw)

            px.call(lambda: setattr(adapter, "post_json", spy))
            first, resumed, recent = resume_run(http, px.url, px, sent)
            ids = set(px.live.observer.tags._by_key.values())
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "find the answer"}]
    resume_actions = [a for a in recent if a["reason"] == "tool_resume" and a["outcome"] == "ok"]
    assert resume_actions, recent
    tokenize = [b for b in sent if b["path"] == "/tokenize"]
    assert tokenize, sent
    warmed_msgs = tokenize[-1]["messages"]
    assert warmed_msgs[:2] == messages  # the session's prompt...
    assert warmed_msgs[-1]["tool_calls"][0]["function"] == first["tool_calls"][0]["function"]  # ...+ its turn
    warm = [b for b in sent if b["path"] == "/v1/completions"][-1]
    # the session's routing key: its requests carried no session id vLLM reads (only `user`), so the
    # proxy forwarded them with its own X-Session-ID, which vllm-router's consistent_hash reads before
    # the body's `user`; the warm repeats that header, not the `user` field
    assert warm["_routing"][0] == "x-session-id" and warm["_routing"][1] in ids and "user" not in warm
    block = 16
    got = resumed["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert got >= (len(warm["prompt"]) // block) * block  # the warmed context is a real hit
    assert direct["usage"]["prompt_tokens_details"]["cached_tokens"] < got / 2  # without the proxy: evicted


def _pauses(http: httpx.Client, margin: float | None) -> list[tuple[int, int]]:
    """One session pausing 5 times on a 3 s tool call while two other sessions' requests push its
    context out of the cache; (cached, prompt) tokens of each resume."""
    got = []
    with run_sim_server(sim_config(tool_call_share=1.0, capacity_blocks=CAPACITY, speed=1.0)) as sim:
        overrides = {"cooldown_s": 0.0, **({} if margin is None else {"resume_wake_margin_s": margin})}
        settings = proxy_settings(sim.url, policy_plan_interval=0.25, policy_overrides=overrides)
        with run_proxy_server(settings) as px:
            prompts = agent_prompts(3, 120)
            messages = [{"role": "system", "content": prompts["A"]}, {"role": "user", "content": "find the answer"}]
            for k in range(6):
                r = stream_chat(http, px.url, messages)
                if k:
                    got.append((r["usage"]["prompt_tokens_details"]["cached_tokens"], r["usage"]["prompt_tokens"]))
                t0 = time.perf_counter()
                for i, name in enumerate("BC"):
                    chat(http, px.url, prompts[name], [{"role": "user", "content": f"other work {k} {i}"}], f"o{k}{i}")
                time.sleep(max(0.0, 3.0 - (time.perf_counter() - t0)))  # the tool runs 3 s in all
                asst = {"role": "assistant", "content": None, "tool_calls": r["tool_calls"]}
                tool = {"role": "tool", "tool_call_id": r["tool_calls"][0]["id"], "content": "42"}
                messages = [*messages, asst, tool]
    return got


def test_a_woken_tool_pause_is_warmed_before_the_resume_on_the_live_tick(http):
    """From the 4th pause on, the agent's pauses are learned and its wakes plan the pause. Identical
    pauses put every wake at one time; the live runtime plans on a 0.25 s tick, so without
    ``resume_wake_margin_s`` the warm went out after the resume (2 s pauses: the 4th resume had
    256 of 818 tokens cached; the 3 before, planned by the session sweep, were cached in full)."""
    got = _pauses(http, None)
    assert all(cached >= 0.9 * prompt for cached, prompt in got), got
