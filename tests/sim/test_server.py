"""The HTTP sim engine: OpenAI/vLLM shapes, errors, streaming, tools, warmup parity, metrics."""

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.sim.conftest import MODEL, make_client

SYSTEM = {"role": "system", "content": "You are the planner agent. Think step by step. " * 12}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        },
    }
]


def chat(messages, **kw):
    return {"model": MODEL, "messages": messages, **kw}


def sse(text):
    out = []
    for line in text.split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[6:]))
    assert text.rstrip().endswith("data: [DONE]")
    return out


def metrics(text):
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


async def test_chat_usage_and_cached_tokens_whole_blocks(client):
    msgs = [SYSTEM, {"role": "user", "content": "hello"}]
    r1 = (await client.post("/v1/chat/completions", json=chat(msgs))).json()
    assert r1["object"] == "chat.completion" and r1["choices"][0]["finish_reason"] == "stop"
    assert r1["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    r2 = (await client.post("/v1/chat/completions", json=chat(msgs))).json()
    p = r2["usage"]["prompt_tokens"]
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] == (p - 1) // 16 * 16 < p
    assert r2["choices"][0]["message"]["content"] == r1["choices"][0]["message"]["content"]
    # the answer's blocks are cached: the next turn hits beyond the first prompt
    msgs3 = msgs + [
        {"role": "assistant", "content": r1["choices"][0]["message"]["content"]},
        {"role": "user", "content": "and then?"},
    ]
    r3 = (await client.post("/v1/chat/completions", json=chat(msgs3))).json()
    assert (
        r3["usage"]["prompt_tokens_details"]["cached_tokens"] >= (p + r1["usage"]["completion_tokens"] - 1) // 16 * 16
    )


async def test_tokenize_then_token_id_warmup_gives_same_blocks(client):
    """The proxy's warmup path: /tokenize(messages) -> /v1/completions(prompt=ids, max_tokens=1, cache_salt)."""
    anchor = [SYSTEM, {"role": "user", "content": "x"}]
    tok = (
        await client.post(
            "/tokenize", json={"model": MODEL, "messages": anchor, "tools": TOOLS, "add_generation_prompt": False}
        )
    ).json()
    assert tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 32768
    warm = await client.post(
        "/v1/completions",
        json={
            "model": MODEL,
            "prompt": tok["tokens"],
            "max_tokens": 1,
            "cache_salt": "agent-a",
            "some_unknown_field": 1,
        },
    )
    assert warm.status_code == 200 and warm.json()["usage"]["completion_tokens"] == 1
    real = chat(
        anchor[:1]
        + [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}, {"role": "user", "content": "z"}],
        tools=TOOLS,
        cache_salt="agent-a",
        max_tokens=5,
    )
    u = (await client.post("/v1/chat/completions", json=real)).json()["usage"]
    assert u["prompt_tokens_details"]["cached_tokens"] == len(tok["tokens"]) // 16 * 16
    other = dict(real, cache_salt="agent-b")
    u = (await client.post("/v1/chat/completions", json=other)).json()["usage"]
    assert u["prompt_tokens_details"]["cached_tokens"] == 0
    text = (await client.post("/tokenize", json={"prompt": "hello world"})).json()
    assert text["count"] == 2
    det = (await client.post("/detokenize", json={"tokens": text["tokens"]})).json()
    assert det["prompt"] == "hello world"


async def test_streaming_chat_with_usage(client):
    r = await client.post(
        "/v1/chat/completions",
        json=chat([{"role": "user", "content": "hi"}], stream=True, stream_options={"include_usage": True}),
    )
    assert r.headers["content-type"].startswith("text/event-stream")
    chunks = sse(r.text)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= len(text.split())
    plain = (await client.post("/v1/chat/completions", json=chat([{"role": "user", "content": "hi"}]))).json()
    assert plain["choices"][0]["message"]["content"] == text


async def test_streaming_completion_without_usage(client):
    r = await client.post(
        "/v1/completions", json={"model": MODEL, "prompt": "once upon", "max_tokens": 5, "stream": True}
    )
    chunks = sse(r.text)
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert sum(1 for c in chunks if c["choices"][0]["text"]) == 5


async def test_tool_calls():
    c = make_client(tool_call_share=1.0)
    try:
        r = (await c.post("/v1/chat/completions", json=chat([{"role": "user", "content": "q"}], tools=TOOLS))).json()
        choice = r["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
        call = choice["message"]["tool_calls"][0]
        assert call["function"]["name"] == "lookup" and "key" in json.loads(call["function"]["arguments"])
        s = await c.post(
            "/v1/chat/completions", json=chat([{"role": "user", "content": "q"}], tools=TOOLS, stream=True)
        )
        chunks = sse(s.text)
        calls = [ch for ch in chunks if ch["choices"] and ch["choices"][0]["delta"].get("tool_calls")]
        assert calls[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "lookup"
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
        # streamed as vLLM's Hermes parser streams it: the name (with id and type) first, then the
        # arguments in pieces as their tokens are generated, which concatenate to the whole call
        deltas = [ch["choices"][0]["delta"]["tool_calls"][0] for ch in calls]
        assert deltas[0]["id"] and deltas[0]["type"] == "function" and "arguments" not in deltas[0]["function"]
        assert len(deltas) > 2 and all(set(d) == {"index", "function"} for d in deltas[1:])
        assert "".join(d["function"]["arguments"] for d in deltas[1:]) == call["function"]["arguments"]
        none = (
            await c.post(
                "/v1/chat/completions", json=chat([{"role": "user", "content": "q"}], tools=TOOLS, tool_choice="none")
            )
        ).json()
        assert none["choices"][0]["finish_reason"] == "stop"
    finally:
        await c.sim.close()
        await c.aclose()


@pytest.mark.parametrize(
    "path,body,status,fragment",
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}, 400, "model"),
        (
            "/v1/chat/completions",
            {"model": "nope", "messages": [{"role": "user", "content": "x"}]},
            404,
            "does not exist",
        ),
        ("/v1/chat/completions", {"model": MODEL, "messages": "x"}, 400, "messages"),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
        (
            "/v1/chat/completions",
            {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "n": 2},
            400,
            "n > 1",
        ),
        (
            "/v1/chat/completions",
            {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            400,
            "at least 1",
        ),
        (
            "/v1/chat/completions",
            {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "cache_salt": ""},
            400,
            "cache_salt",
        ),
        (
            "/v1/chat/completions",
            {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 40000},
            400,
            "maximum context length",
        ),
        ("/v1/completions", {"model": MODEL, "prompt": [1, 2, 10**9]}, 400, "vocabulary"),
        ("/v1/completions", {"model": MODEL, "prompt": "w " * 40000}, 400, "maximum context length"),
        ("/v1/completions", {"model": MODEL}, 400, "prompt"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "stream": "yes"}, 400, "stream"),
        (
            "/v1/completions",
            {"model": MODEL, "prompt": "x", "stream_options": {"include_usage": True}},
            400,
            "stream=True",
        ),
        ("/tokenize", {"model": MODEL}, 400, "prompt"),
    ],
)
async def test_bad_requests_get_vllm_like_errors(client, path, body, status, fragment):
    r = await client.post(path, json=body)
    assert r.status_code == status
    err = r.json()["error"]
    assert fragment in err["message"] and err["code"] == status


async def test_invalid_json_and_non_object(client):
    r = await client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "Invalid JSON" in r.json()["error"]["message"]
    r = await client.post("/v1/completions", json=[1, 2])
    assert r.status_code == 400


async def test_models_health_reset_flush_and_metrics(client):
    assert (await client.get("/health")).status_code == 200
    models = (await client.get("/v1/models")).json()
    assert models["data"][0]["id"] == MODEL
    msgs = [SYSTEM, {"role": "user", "content": "hello"}]
    await client.post("/v1/chat/completions", json=chat(msgs))
    await client.post("/v1/chat/completions", json=chat(msgs))
    m = metrics((await client.get("/metrics")).text)
    q, h = m["vllm:prefix_cache_queries_total"], m["vllm:prefix_cache_hits_total"]
    assert q > 0 and 0 < h < q
    assert m["vllm:num_requests_running"] == 0 and m["vllm:kv_cache_usage_perc"] == 0
    assert m["vllm:time_to_first_token_seconds_count"] == 2
    assert "sglang:cache_hit_rate" not in m
    assert (await client.post("/reset_prefix_cache")).status_code == 200
    r = (await client.post("/v1/chat/completions", json=chat(msgs))).json()
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert (await client.post("/flush_cache")).status_code == 200
    m2 = metrics((await client.get("/metrics")).text)
    assert m2["vllm:prefix_cache_hits_total"] == h  # counters survive a reset


async def test_priority_mode_exposes_sglang_metrics_and_keeps_high_priority():
    c = make_client(eviction="priority", capacity_blocks=40, block_size=16, output_tokens=2, max_model_len=512)
    try:

        def prompt(i):
            return [100 + i * 1000 + k for k in range(200)]  # 12 full blocks each

        await c.post("/v1/completions", json={"model": MODEL, "prompt": prompt(0), "max_tokens": 1, "priority": 10})
        for i in range(1, 4):  # 3 more prompts overflow 40 blocks
            await c.post("/v1/completions", json={"model": MODEL, "prompt": prompt(i), "max_tokens": 1})
        r = (await c.post("/v1/completions", json={"model": MODEL, "prompt": prompt(0), "max_tokens": 1})).json()
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 192
        m = metrics((await c.get("/metrics")).text)
        assert 0 < m["sglang:cache_hit_rate"] < 1 and m["sglang:token_usage"] == 0
        assert m["cachescout_sim_evicted_blocks_total"] > 0
    finally:
        await c.sim.close()
        await c.aclose()


async def test_prompt_tokens_details_can_be_disabled():
    c = make_client(prompt_tokens_details=False)
    try:
        r = (await c.post("/v1/completions", json={"model": MODEL, "prompt": "abc", "max_tokens": 2})).json()
        assert r["usage"]["prompt_tokens_details"] is None and r["usage"]["completion_tokens"] == 2
    finally:
        await c.sim.close()
        await c.aclose()


async def test_sglang_generate_with_input_ids(client):
    ids = list(range(500, 560))
    r1 = await client.post("/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": 1}})
    r2 = (
        await client.post("/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": 3}, "priority": 5})
    ).json()
    assert r1.status_code == 200 and r1.json()["meta_info"]["cached_tokens"] == 0
    assert r2["meta_info"]["cached_tokens"] == 48 and r2["meta_info"]["completion_tokens"] == 3
    assert r2["meta_info"]["finish_reason"]["type"] == "length"
    assert (await client.post("/generate", json={"sampling_params": {}})).status_code == 400


async def test_kv_cache_metrics_count_evictions_like_vllm():
    """vLLM --kv-cache-metrics (sample 1.0): the idle-before-evict count is the number of evicted blocks."""
    c = make_client(capacity_blocks=30, output_tokens=2)
    try:
        for i in range(6):
            await c.post(
                "/v1/completions",
                json={"model": MODEL, "prompt": [7 + i * 500 + k for k in range(160)], "max_tokens": 1},
            )
        await c.post(
            "/v1/completions", json={"model": MODEL, "prompt": [7 + 5 * 500 + k for k in range(160)], "max_tokens": 1}
        )
        m = metrics((await c.get("/metrics")).text)
        evicted = c.sim.engine.pool.stats().evictions
        assert evicted > 0
        assert m["vllm:kv_block_idle_before_evict_seconds_count"] == evicted == m["cachescout_sim_evicted_blocks_total"]
        assert m["vllm:kv_block_lifetime_seconds_count"] == evicted
        assert m["vllm:kv_block_reuse_gap_seconds_count"] >= 9  # the repeated prompt reused its blocks
    finally:
        await c.sim.close()
        await c.aclose()
