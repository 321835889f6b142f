"""The sim's /v1/responses and /v1/messages (converted to chat, as vLLM does), and the exact-token
property of an anchor cut inside a message (`continue_final_message` + the adapter's boundary drop)."""

from __future__ import annotations

from proxy.core import view_from_openai
from proxy.core.fingerprint import truncate_payload
from proxy.engines.vllm import BOUNDARY_TOKENS
from tests.sim.conftest import MODEL

INSTR = "You are the billing agent. Answer from the invoice only. " * 10


async def test_responses_route_caches_like_chat_and_chains_previous_response(client):
    body = {"model": MODEL, "instructions": INSTR, "input": "what is my balance?", "max_output_tokens": 8}
    r1 = (await client.post("/v1/responses", json=body)).json()
    assert r1["object"] == "response" and r1["status"] in ("completed", "incomplete")
    assert r1["output"][0]["type"] in ("message", "function_call")
    chat = {
        "model": MODEL,
        "max_tokens": 8,
        "messages": [{"role": "system", "content": INSTR}, {"role": "user", "content": "what is my balance?"}],
    }
    c = (await client.post("/v1/chat/completions", json=chat)).json()
    assert c["usage"]["prompt_tokens"] == r1["usage"]["input_tokens"]  # one rendering
    assert c["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # the twin hit its blocks
    nxt = {
        "model": MODEL,
        "instructions": INSTR,
        "previous_response_id": r1["id"],
        "input": "and last month?",
        "max_output_tokens": 8,
    }
    r2 = (await client.post("/v1/responses", json=nxt)).json()
    assert r2["usage"]["input_tokens"] > r1["usage"]["input_tokens"]  # history prepended
    assert r2["usage"]["input_tokens_details"]["cached_tokens"] >= r1["usage"]["input_tokens"] // 16 * 16 - 16
    missing = await client.post("/v1/responses", json={**nxt, "previous_response_id": "resp_nope"})
    assert missing.status_code == 404


async def test_messages_route(client):
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "system": INSTR,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
    }
    r = (await client.post("/v1/messages", json=body)).json()
    assert r["type"] == "message" and r["stop_reason"] in ("end_turn", "max_tokens", "tool_use")
    assert r["usage"]["input_tokens"] > 0
    stream = await client.post("/v1/messages", json={**body, "stream": True})
    assert stream.status_code == 400  # said plainly


async def test_an_anchor_cut_inside_a_message_rebuilds_a_prefix_of_the_real_tokens(client):
    """Instructions and variable content in one first user message: the anchor payload for the
    first k blocks, tokenized with continue_final_message minus the boundary tokens, is a token
    prefix of the full request's prompt, for every cut."""
    content = INSTR + " Here is the page: " + "lorem ipsum dolorsitamet " * 200
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
    view = view_from_openai("/v1/chat/completions", body, {})
    full = (await client.post("/tokenize", json={**body, "add_generation_prompt": True})).json()["tokens"]
    checked = 0
    for n in range(2, len(view.block_hashes)):
        cut = truncate_payload(view.anchor_payload, n)
        assert cut["continue_final_message"] is True
        ids = (
            await client.post(
                "/tokenize",
                json={
                    "model": MODEL,
                    "messages": cut["messages"],
                    "add_generation_prompt": False,
                    "continue_final_message": True,
                },
            )
        ).json()["tokens"]
        ids = ids[:-BOUNDARY_TOKENS]
        assert ids == full[: len(ids)] and len(ids) > 0
        checked += 1
    assert checked > 50
