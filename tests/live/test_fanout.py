"""Fan-out: an agent with two likely successors gets `fanout` actions for the second one, and the
executor runs them and counts them in cachescout_actions_total{reason="fanout"} like any other."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from proxy.harness.proxy_server import run_proxy_server
from proxy.harness.sim_server import run_sim_server

from .conftest import MODEL, agent_prompts, chat, proxy_settings, sim_config

pytestmark = pytest.mark.sockets

PROMPTS = agent_prompts(3, 120)


def outcomes(px, reason: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in px.app.state.metrics.actions_total.collect():
        for s in metric.samples:
            if s.name.endswith("_total") and s.labels["reason"] == reason:
                out[s.labels["outcome"]] = out.get(s.labels["outcome"], 0.0) + s.value
    return out


def test_second_successor_is_warmed_as_fanout(http: httpx.Client):
    policy = {"top_k": 2, "tau": 0.0, "cooldown_s": 0.0, "action_ttl_s": 5.0, "r_min_transitions": 0, "sweep_top_n": 0}
    with run_sim_server(sim_config(capacity_blocks=64)) as sim:
        with run_proxy_server(proxy_settings(sim.url, policy_r_min=0.0, policy_overrides=policy)) as px:
            for s in range(8):  # A, then B in even sessions and C in odd ones
                hist = [{"role": "user", "content": f"task {s}: " + " ".join(f"w{s}x{k}" for k in range(20))}]
                for agent in ("A", "BC"[s % 2]):
                    j = chat(http, px.url, PROMPTS[agent], hist, f"s{s}")
                    hist.append({"role": "user", "content": f"{agent}: {j['choices'][0]['message']['content']}"})
                    assert px.call(lambda: px.live.settle(5.0))
            assert px.call(lambda: px.live.quiesce(5.0))
            fan = outcomes(px, "fanout")
            recent = list(px.live.executor.recent)
            metrics = http.get(px.url + "/metrics").text
    assert fan.get("ok", 0) >= 1, (fan, recent)
    assert any(r["reason"] == "fanout" and r["outcome"] == "ok" for r in recent)
    assert 'reason="fanout"' in metrics


async def _siblings(url: str, system: str, shared: str, k: int) -> list[int]:
    """k requests of one session on one parent prefix, the later ones sent while the first runs."""

    async def one(i: int, delay: float) -> int:
        await asyncio.sleep(delay)
        tail = " ".join(f"b{i}y{j}" for j in range(8))
        body = {
            "model": MODEL,
            "user": "fan-1",
            "max_tokens": 64,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": f"{shared} -- branch {i}: {tail}"},
            ],
        }
        async with httpx.AsyncClient(timeout=20) as c:
            r = await c.post(url + "/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        return r.json()["usage"]["prompt_tokens"]

    return await asyncio.gather(*(one(i, 0.0 if i == 0 else 0.05) for i in range(k)))


def test_concurrent_siblings_keep_their_shared_parent():
    """Three requests of one session on one long parent, the last two while the first still runs: the
    core sees a fan-out (a fact, not gated by R) and keeps the parent. Nothing pushes the parent
    toward eviction in so short a run, so the action here is a Retain (SGLang-style priority engine,
    retain for session parents switched on); the executor sends it like any action, with priority."""
    shared = "shared context: " + " ".join(f"doc{k} line" for k in range(120))
    policy = {"retain_enabled": 1, "retain_sessions": 1}
    # speed 1 and ~100 output tokens: the first sibling is still decoding when the others arrive
    with run_sim_server(sim_config(speed=1.0, output_tokens=100, eviction="priority")) as sim:
        with run_proxy_server(proxy_settings(sim.url, policy_overrides=policy)) as px:
            asyncio.run(_siblings(px.url, PROMPTS["A"], shared, 3))
            assert px.call(lambda: px.live.quiesce(5.0))
            fan = outcomes(px, "fanout")
            fanouts = px.live.policy.fanouts
            recent = list(px.live.executor.recent)
    assert fanouts >= 1
    assert fan.get("ok", 0) >= 1, (fan, recent)
    assert {r["kind"] for r in recent if r["reason"] == "fanout"} <= {"retain", "touch"}  # never a warm
