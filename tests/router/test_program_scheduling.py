"""benchmarks/program_scheduling.py: its arms, its tuned vllm-router config, its figures, and a smoke
run of one arm on loopback (sim engine behind `vllm-router --enable-program-scheduling`): the
workload's `vllm_xargs.agentic_context` must reach the router's program scheduler, which then lists
each session as a program in `/scheduling/diagnostics`, and a top-level `priority` (the session
lane's lever) must pass through the router to the engine. Skipped when the vllm-router binary is absent.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from benchmarks.program_scheduling import ARMS, _find, arm, figures, mean_2se, start_all, tuned_config
from proxy.harness.router_fleet import MODEL, FleetConfig, find_router
from proxy.harness.workload import DemoSpec, RequestRecord, WorkloadResult, run_workload

ROUTER, WHY = find_router()


def test_arms_map_to_their_layers() -> None:
    plain, ps, lane, both = arm("router"), arm("router+ps"), arm("lane-las"), arm("lane+ps")
    assert (plain.program_scheduling, plain.lane, plain.priority_engine) == ("", None, False)
    assert (ps.program_scheduling, ps.lane) == ("defaults", None)
    assert (lane.program_scheduling, lane.lane, lane.priority_engine) == ("", "las", True)
    assert (both.program_scheduling, both.lane, both.priority_engine) == ("tuned", "continue", True)
    assert not arm("scout").priority_engine  # the proxy-hop control runs FCFS engines
    assert len(set(ARMS)) == len(ARMS)
    with pytest.raises(ValueError):
        arm("nope")


def test_tuned_config_follows_the_sim_cost_model_and_docs_constraints() -> None:
    cfg = FleetConfig(cache_blocks=200, prefill_tps=5000.0, speed=2.0)
    c = tuned_config(cfg)
    assert c["global_queue"] is True
    assert c["token_capacity_per_target"] == 200 * 16
    # 1k cold tokens at 5000 tok/s take 0.2 virtual s, 0.1 wall s at speed 2
    assert c["prefill_cost_model"]["linear_seconds_per_1k_tokens"] == pytest.approx(0.1)
    assert 0 <= c["prefill_cost_model"]["decode_throughput_alpha"] <= 1
    assert c["decode_throughput_model"]["fixed_step_seconds"] > 0


def test_figures_split_resumes_and_hit_rate() -> None:
    res = WorkloadResult(
        records=[
            RequestRecord("a", 0, 100, 50, 0.2, 0.3, "tool_calls", False),
            RequestRecord("a", 0, 120, 100, 0.1, 0.2, "stop", True),
            RequestRecord("b", 1, 80, 0, None, 0.1, "stop", False),
        ],
        session_spans=[1.0, 3.0],
    )
    f = figures(res)
    assert f["session_s"] == pytest.approx(2.0)
    assert f["ttft_resume_s"] == pytest.approx(0.1)
    assert f["ttft_first_s"] == pytest.approx(0.2)
    assert f["ttft_s"] == pytest.approx(0.15)
    assert f["hit_rate"] == pytest.approx(150 / 300)
    m, se = mean_2se([1.0, 2.0, 3.0])
    assert (m, se) == (pytest.approx(2.0), pytest.approx(2 * 1.0 / 3**0.5))
    assert _find({"a": [{"b": {"rolling": {"x": 1}}}]}, "rolling") == {"x": 1}


@pytest.mark.sockets
def test_program_scheduling_sees_the_sessions() -> None:
    if ROUTER is None:
        pytest.skip(WHY)
    import httpx

    cfg = FleetConfig(replicas=1, cache_blocks=200, prefill_tps=20000.0, speed=4.0, output_tokens=4)
    spec = DemoSpec(
        agents=2,
        tool_agents=1,
        sessions=3,
        concurrency=3,
        steps=(2, 2),
        anchor_words=(60, 80),
        task_words=(10, 20),
        tool_result_words=(5, 10),
        tool_seconds=(0.05, 0.1),
        think_seconds=0.01,
        max_tokens=48,
        session_header=True,
        agentic_context=True,
    )
    with contextlib.ExitStack() as stack:
        fronts, routers = start_all([arm("router+ps-tuned")], cfg, ROUTER, stack)
        res = asyncio.run(run_workload(fronts["router+ps-tuned"], spec, model=MODEL))
        doc = httpx.get(routers["router+ps-tuned"] + "/scheduling/diagnostics", timeout=10).json()
        # the session lane's lever reaches the engine through the router: a top-level `priority` is
        # forwarded (this arm's engine runs FCFS, so it refuses a non-zero one as vLLM V0 did)
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "priority": 5}
        refused = httpx.post(fronts["router+ps-tuned"] + "/v1/chat/completions", json=body, timeout=30)
    assert res.errors == 0
    assert refused.status_code == 400 and "priority" in refused.text.lower()
    assert len(res.session_spans) == 3 and all(s > 0 for s in res.session_spans)
    programs = _find(doc, "programs") or []
    assert {p.get("session_id") for p in programs} == {"session-0", "session-1", "session-2"}
