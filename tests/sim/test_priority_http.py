"""vLLM's priority field over HTTP: refused under fcfs (400, vLLM's error envelope), honoured under
`--scheduling-policy priority`; preemptions counted on /metrics."""

import asyncio

import pytest

from proxy.simengine import server_cli
from tests.sim.conftest import MODEL, make_client
from tests.sim.test_cli import parse
from tests.sim.test_server import metrics


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
async def test_fcfs_refuses_priority_with_a_400(route):
    c = make_client()
    body = {"model": MODEL, "max_tokens": 2, "priority": -1}
    body.update(
        {"prompt": "hello"} if route == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]}
    )
    try:
        r = await c.post(route, json=body)
        assert r.status_code == 400
        err = r.json()["error"]
        assert err == {
            "message": "Got priority -1 but Priority scheduling is not enabled.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
        body["priority"] = 0
        assert (await c.post(route, json=body)).status_code == 200  # the default is always fine
    finally:
        await c.sim.close()
        await c.aclose()


async def test_priority_policy_accepts_priority_and_ignore_mode_too():
    for kw in ({"scheduling_policy": "priority"}, {"fcfs_priority": "ignore"}):
        c = make_client(**kw)
        try:
            r = await c.post(
                "/v1/completions", json={"model": MODEL, "prompt": "hello", "max_tokens": 2, "priority": 7}
            )
            assert r.status_code == 200
        finally:
            await c.sim.close()
            await c.aclose()


async def test_preemptions_are_counted_on_metrics():
    c = make_client(capacity_blocks=8, block_size=16, output_tokens=60, output_jitter=0.0, max_model_len=128)
    try:
        prompts = [" ".join(f"w{i}x{k}" for k in range(20)) for i in range(3)]
        rs = await asyncio.gather(
            *(c.post("/v1/completions", json={"model": MODEL, "prompt": p, "max_tokens": 60}) for p in prompts)
        )
        assert all(r.status_code == 200 for r in rs)
        m = metrics((await c.get("/metrics")).text)
        assert c.sim.engine.num_preemptions > 0
        assert m["vllm:num_preemptions_total"] == c.sim.engine.num_preemptions
    finally:
        await c.sim.close()
        await c.aclose()


def test_cli_scheduling_flags():
    cfg = server_cli.config_from_args(parse("--scheduling-policy", "priority", "--long-prefill-token-threshold", "512"))
    assert (cfg.scheduling_policy, cfg.long_prefill_token_threshold) == ("priority", 512)
    assert cfg.engine_config().scheduling_policy == "priority"
    cfg = server_cli.config_from_args(
        parse(
            "--enable-priority-scheduling", "--priority-scheduling-preemption-threshold", "3", "--eviction", "priority"
        )
    )
    assert (cfg.scheduling_policy, cfg.priority_preemption_threshold, cfg.low_priority_values_first) == (
        "sglang",
        3,
        False,
    )
    assert server_cli.config_from_args(parse()).scheduling_policy == "fcfs"
    assert server_cli.run(parse("--enable-priority-scheduling", "--scheduling-policy", "priority")) == 2
