"""Canonical view: stable under envelope key order/whitespace, sensitive to content, defensive."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import WARMUP_HEADER, view_from_openai
from proxy.core.fingerprint import truncate_payload

CHAT = "/v1/chat/completions"
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=300)
roles = st.sampled_from(["user", "assistant", "tool"])


@st.composite
def chat_bodies(draw):
    msgs = [{"role": "system", "content": draw(text)}]
    for _ in range(draw(st.integers(0, 5))):
        role = draw(roles)
        m = {
            "role": role,
            "content": draw(
                st.one_of(text, st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": text}), max_size=3))
            ),
        }
        if role == "tool":
            m["tool_call_id"] = draw(st.text("abc123", min_size=1, max_size=8))
        msgs.append(m)
    body = {
        "model": draw(st.sampled_from(["m1", "m2"])),
        "messages": msgs,
        "temperature": draw(st.floats(0, 2)),
        "max_tokens": draw(st.integers(2, 4096)),
    }
    if draw(st.booleans()):
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "parameters": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
                },
            }
        ]
    return body


def _shuffle_keys(obj, rng):
    if isinstance(obj, dict):
        items = list(obj.items())
        rng.shuffle(items)
        return {k: _shuffle_keys(v, rng) for k, v in items}
    if isinstance(obj, list):
        return [_shuffle_keys(v, rng) for v in obj]
    return obj


@settings(max_examples=60, deadline=None)
@given(chat_bodies(), st.integers(0, 2**32 - 1))
def test_chain_is_stable_under_key_order_and_whitespace(body, seed):
    rng = random.Random(seed)
    compact = json.dumps(body, separators=(",", ":")).encode()
    spaced = json.dumps(_shuffle_keys(body, rng), indent=rng.choice([None, 1, 4])).encode()
    a = view_from_openai(CHAT, compact, {})
    b = view_from_openai(CHAT, spaced, {})
    assert a is not None and b is not None
    assert a.block_hashes == b.block_hashes
    assert a.anchor_blocks == b.anchor_blocks >= 1
    # sampling parameters are not part of the prompt
    c = view_from_openai(CHAT, {**body, "temperature": 0.123, "max_tokens": 7}, {})
    assert c.block_hashes == a.block_hashes


@settings(max_examples=60, deadline=None)
@given(chat_bodies(), st.data())
def test_any_content_change_changes_the_chain_from_that_block_on(body, data):
    base = view_from_openai(CHAT, body, {})
    i = data.draw(st.integers(0, len(body["messages"]) - 1))
    changed = json.loads(json.dumps(body))
    msg = changed["messages"][i]
    msg["content"] = (msg["content"] if isinstance(msg["content"], str) else "") + "!"
    other = view_from_openai(CHAT, changed, {})
    assert other.block_hashes != base.block_hashes
    # blocks before the changed message are shared; the last block is never shared
    common = 0
    for x, y in zip(base.block_hashes, other.block_hashes):
        if x != y:
            break
        common += 1
    assert common < len(base.block_hashes) and common < len(other.block_hashes)
    if i > 0:
        assert common >= base.anchor_blocks  # the system prompt (anchor) is unchanged


def _chat(system="You are the planner. " * 10, user="hi", **extra):
    return {
        "model": "m",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        **extra,
    }


def test_follow_up_turn_extends_the_parent_chain():
    first = _chat()
    follow = json.loads(json.dumps(first))
    follow["messages"] += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    a = view_from_openai(CHAT, first, {})
    b = view_from_openai(CHAT, follow, {})
    assert b.block_hashes[: len(a.block_hashes)] == a.block_hashes
    assert len(b.block_hashes) > len(a.block_hashes)


def test_anchor_covers_model_tools_and_system_only():
    tools = [{"type": "function", "function": {"name": "search"}}]
    a = view_from_openai(CHAT, _chat(user="one", tools=tools), {})
    b = view_from_openai(CHAT, _chat(user="two, much longer " * 20, tools=tools), {})
    c = view_from_openai(CHAT, _chat(user="one", tools=[{"type": "function", "function": {"name": "x"}}]), {})
    assert a.anchor_blocks == b.anchor_blocks
    assert a.block_hashes[: a.anchor_blocks] == b.block_hashes[: b.anchor_blocks]
    assert a.block_hashes[a.anchor_blocks - 1] != c.block_hashes[c.anchor_blocks - 1]
    assert a.anchor_payload["kind"] == "chat"
    assert a.anchor_payload["tools"] == tools
    assert [m["role"] for m in truncate_payload(a.anchor_payload, a.anchor_blocks)["messages"]] == ["system"]
    assert [m["role"] for m in a.context_payload["messages"]] == ["system", "user"]
    assert sum(a.block_tokens) > 0 and all(t >= 1 for t in a.block_tokens)


def test_chat_template_kwargs_are_part_of_the_anchor_and_payload():
    a = view_from_openai(CHAT, _chat(), {})
    b = view_from_openai(CHAT, _chat(chat_template_kwargs={"enable_thinking": False}), {})
    assert a.block_hashes[0] != b.block_hashes[0]
    assert b.anchor_payload["chat_template_kwargs"] == {"enable_thinking": False}


def test_without_system_prompt_nothing_is_marked_and_a_cut_anchor_rebuilds_the_recurring_part():
    """No system message: no marked anchor (the prefix index finds where the recurring part ends);
    an anchor ending inside the first user message is rebuilt as that message cut at the block,
    rendered open (continue_final_message)."""
    instructions = "You are a coder. Follow the rules below exactly. " * 4
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": instructions + "Task: x" * 40},
            {"role": "assistant", "content": "ok"},
        ],
    }
    v = view_from_openai(CHAT, body, {})
    assert v.anchor_blocks == 0 and v.header_blocks == 1
    cut = truncate_payload(v.anchor_payload, 3)  # header + two blocks of the first message
    assert cut["continue_final_message"] is True and len(cut["messages"]) == 1
    content = cut["messages"][0]["content"]
    assert instructions.startswith(content) and 64 < len(content) < 128
    whole = truncate_payload(v.anchor_payload, v.anchor_payload["segs"][1][0])  # up to the 2nd message
    assert whole["messages"] == body["messages"][:1] and "continue_final_message" not in whole
    assert truncate_payload(v.anchor_payload, 1) is None  # the header alone rebuilds nothing


def test_responses_and_messages_bodies_hash_like_their_chat_twin():
    chat = {
        "model": "m",
        "messages": [{"role": "system", "content": "S" * 300}, {"role": "user", "content": "q" * 90}],
        "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}],
    }
    resp = {
        "model": "m",
        "instructions": "S" * 300,
        "input": "q" * 90,
        "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {}}],
    }
    anth = {
        "model": "m",
        "system": [{"type": "text", "text": "S" * 300}],
        "max_tokens": 5,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "q" * 90}]}],
        "tools": [{"name": "f", "description": "d", "input_schema": {}}],
    }
    a = view_from_openai(CHAT, chat, {})
    b = view_from_openai("/v1/responses", resp, {})
    c = view_from_openai("/v1/messages", anth, {})
    assert a.block_hashes == b.block_hashes == c.block_hashes
    assert b.context_payload["messages"] == chat["messages"]
    hidden = view_from_openai("/v1/responses", {**resp, "previous_response_id": "resp_1"}, {})
    assert hidden.block_hashes == a.block_hashes[: a.anchor_blocks]  # only the instructions are visible
    assert hidden.context_payload is None


def test_cache_salt_isolates_tenants():
    a = view_from_openai(CHAT, _chat(), {})
    b = view_from_openai(CHAT, _chat(cache_salt="tenant-b"), {})
    assert a.tenant == "" and b.tenant == "tenant-b"
    assert not set(a.block_hashes) & set(b.block_hashes)
    assert b.anchor_payload["cache_salt"] == "tenant-b"


def test_session_id_priority():
    body = _chat(user="x", metadata={"session_id": "meta"}, prompt_cache_key="pck")
    assert view_from_openai(CHAT, {**body, "user": "u"}, {"X-Session-ID": "hdr"}).session_id == "hdr"
    # the end-user field comes last: it is most often one constant for a whole app (issue 23)
    assert view_from_openai(CHAT, {**body, "user": "u"}, {}).session_id == "meta"
    assert view_from_openai(CHAT, body, {}).session_id == "meta"
    assert view_from_openai(CHAT, {**body, "metadata": {}}, {}).session_id == "pck"
    assert view_from_openai(CHAT, {**body, "metadata": {}, "prompt_cache_key": None, "user": "u"}, {}).session_id == "u"
    assert view_from_openai(CHAT, _chat(), {}).session_id is None


def test_session_ids_agent_harnesses_send():
    """Claude Code, Codex, OpenCode headers; vllm_xargs.agentic_context; Responses `conversation`."""
    body = _chat()
    for name in ("X-Claude-Code-Session-Id", "session-id", "x-session-affinity", "x-parent-session-id"):
        assert view_from_openai(CHAT, body, {name: "h1"}).session_id == "h1", name
    xargs = {"vllm_xargs": {"agentic_context": {"program_id": "p7", "task_id": "t"}}}
    assert view_from_openai(CHAT, {**body, **xargs}, {}).session_id == "p7"
    assert view_from_openai(CHAT, {**body, "conversation": {"id": "conv_1"}}, {}).session_id == "conv_1"
    assert view_from_openai(CHAT, {**body, "conversation": "conv_2", "user": "u"}, {}).session_id == "conv_2"


def test_history_keys_follow_the_conversation_not_the_system_prompt():
    msgs = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "a", "name": "x"}]
    a = view_from_openai(CHAT, {"model": "m", "messages": [{"role": "system", "content": "A " * 40}, *msgs]}, {})
    b_msgs = [{"role": "user", "content": "task"}, {"role": "user", "content": "a", "name": "x"}]
    b = view_from_openai(CHAT, {"model": "m", "messages": [{"role": "system", "content": "B " * 40}, *b_msgs]}, {})
    assert len(a.history_keys) == 2 and a.history_keys == b.history_keys  # content only
    assert not set(a.block_hashes[1:]) & set(b.block_hashes[1:])
    c = view_from_openai(CHAT, {"model": "m", "messages": msgs, "cache_salt": "t2"}, {})
    assert not set(c.history_keys) & set(a.history_keys)  # tenants never share them


def test_warmups_are_flagged():
    assert view_from_openai(CHAT, _chat(max_tokens=1), {}).is_warmup
    assert view_from_openai(CHAT, _chat(max_completion_tokens=0), {}).is_warmup
    assert view_from_openai(CHAT, _chat(max_tokens=64), {WARMUP_HEADER: "1"}).is_warmup
    assert not view_from_openai(CHAT, _chat(max_tokens=64), {WARMUP_HEADER: "0"}).is_warmup
    v = view_from_openai(CHAT, _chat(max_tokens=64), {})
    assert not v.is_warmup and v.max_tokens == 64


def test_content_parts_and_tool_messages_parse():
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "sys"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "1", "content": "result"},
            {"role": "developer", "content": "dev"},
        ],
    }
    v = view_from_openai(CHAT, body, {})
    assert v is not None and len(v.block_hashes) >= 5
    image2 = json.loads(json.dumps(body))
    image2["messages"][1]["content"][1]["image_url"]["url"] = "data:image/png;base64,BBBB"
    assert view_from_openai(CHAT, image2, {}).block_hashes != v.block_hashes


def test_unparseable_requests_yield_no_view():
    bad = [
        (CHAT, b"{not json"),
        (CHAT, []),
        (CHAT, {"model": "m"}),
        (CHAT, {"messages": []}),
        (CHAT, {"messages": "hi"}),
        (CHAT, {"messages": [{"content": "no role"}]}),
        (CHAT, {"messages": [{"role": "user", "content": 5}]}),
        (CHAT, {"messages": ["x"]}),
        (CHAT, {"messages": [{"role": "user", "content": [3]}]}),
        (CHAT, {"messages": [{"role": "user", "content": "x"}], "tools": "nope"}),
        ("/v1/embeddings", {"input": "x"}),
        ("/v1/completions", {"prompt": ["a", "b"]}),
        ("/v1/completions", {"prompt": ""}),
        ("/v1/completions", {"prompt": [1, "x"]}),
        ("/v1/completions", {}),
        (CHAT, None),
        (None, {"messages": []}),
    ]
    for path, body in bad:
        assert view_from_openai(path, body, {}) is None, (path, body)


def test_completion_prompts_text_and_token_ids():
    text_view = view_from_openai("/v1/completions", {"model": "m", "prompt": "abc" * 100}, {})
    assert text_view.anchor_blocks == 0 and len(text_view.block_hashes) > 3
    longer = view_from_openai("/v1/completions", {"model": "m", "prompt": "abc" * 100 + "tail"}, {})
    assert longer.block_hashes[: len(text_view.block_hashes) - 1] == text_view.block_hashes[:-1]
    ids = view_from_openai("/v1/completions", {"model": "m", "prompt": list(range(40)), "user": "s"}, {})
    assert ids.block_tokens[1:] == (16, 16, 8) and ids.session_id == "s"
    batch1 = view_from_openai("/v1/completions", {"model": "m", "prompt": ["abc" * 100]}, {})
    assert batch1.block_hashes == text_view.block_hashes
    cut = truncate_payload(text_view.anchor_payload, 3)
    assert cut == {"kind": "completion", "model": "m", "prompt": ("abc" * 100)[:128]}
    chat_payload = {"kind": "chat", "messages": []}
    assert truncate_payload(chat_payload, 3) is chat_payload


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | text,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "model",
                    "messages",
                    "role",
                    "content",
                    "tools",
                    "prompt",
                    "type",
                    "text",
                    "cache_salt",
                    "user",
                    "metadata",
                    "session_id",
                    "max_tokens",
                    "name",
                    "x",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=25,
)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/other"]),
    json_values,
    st.dictionaries(st.sampled_from(["x-session-id", "X-CacheScout-Warmup", "other"]), text, max_size=2),
)
def test_any_json_shape_gives_a_view_or_none_never_an_error(path, body, headers):
    v = view_from_openai(path, body, headers)
    if v is not None:
        assert len(v.block_hashes) == len(v.block_tokens) > 0
        assert 0 <= v.anchor_blocks <= len(v.block_hashes)
        assert all(isinstance(h, int) and 0 <= h < 2**64 for h in v.block_hashes)
    # and the same as raw bytes (the forwarder may hand over the body undecoded)
    try:
        raw = json.dumps(body).encode()
    except (ValueError, TypeError):
        return
    w = view_from_openai(path, raw, headers)
    assert (w is None) == (v is None) or body != json.loads(raw)
