"""Fan-out: an agent with two likely successors gets `fanout` actions for the second one, and the
executor runs them and counts them in cachescout_actions_total{reason="fanout"} like any other."""

from __future__ import annotations

import httpx
import pytest

from proxy.runtime.testing import run_proxy_server
from proxy.sim.testing import run_sim_server

from .conftest import agent_prompts, chat, proxy_settings, sim_config

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
    policy = {"top_k": 2, "tau": 0.0, "cooldown_s": 0.0, "action_ttl_s": 5.0, "r_min_transitions": 0,
              "sweep_top_n": 0}
    with run_sim_server(sim_config(capacity_blocks=64)) as sim:
        with run_proxy_server(proxy_settings(sim.url, policy_r_min=0.0, policy_overrides=policy)) as px:
            for s in range(8):                          # A, then B in even sessions and C in odd ones
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
