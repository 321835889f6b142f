"""Tokenizer and chat template: stable ids, prefix stability, generated turns re-render exactly."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.cachemodel.block_hash import chain_hashes
from proxy.simengine.chat_template import GENERATION_PROMPT, render_chat, render_tool_call
from proxy.simengine.generation import plan_output
from proxy.simengine.tokenizer import IM_END, IM_START, SimTokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "web search",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}, "k": {"type": "integer"}},
                "required": ["q", "k"],
            },
        },
    }
]


def test_ids_are_stable_across_instances_and_specials_fixed():
    a, b = SimTokenizer(), SimTokenizer()
    text = f"{IM_START}user\nHello, world! 123{IM_END}\n"
    assert a.encode(text) == b.encode(text)
    ids = a.encode(text)
    assert ids[0] == 0 and 1 in ids
    assert all(0 <= i < a.vocab_size for i in ids)
    assert a.decode(ids) == text


def test_pieces_shape():
    t = SimTokenizer()
    assert t.pieces("Hi  there!\nok") == ["Hi", "  there", "!", "\n", "ok"]
    assert t.pieces("abcdefghijkl") == ["abcdefgh", "ijkl"]  # long words cut in 8-char pieces


@given(st.text(max_size=60), st.text(max_size=60))
@settings(max_examples=150, deadline=None)
def test_concatenation_after_newline_is_prefix_stable(a, b):
    t = SimTokenizer()
    left = a + "\n"
    assert t.encode(left + b)[: len(t.encode(left))] == t.encode(left)


def test_equal_message_prefixes_give_equal_token_prefixes():
    t = SimTokenizer()
    sys_msg = {"role": "system", "content": "You are the planner. " * 20}
    m1 = [sys_msg, {"role": "user", "content": "task one"}]
    m2 = m1 + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    anchor = t.encode(render_chat(m1, TOOLS, add_generation_prompt=False))
    full = t.encode(render_chat(m2, TOOLS))
    assert full[: len(anchor)] == anchor
    h_anchor, h_full = chain_hashes(anchor, 16), chain_hashes(full, 16)
    assert h_full[: len(h_anchor)] == h_anchor
    other = t.encode(render_chat([{"role": "system", "content": "You are the critic. " * 20}] + m1[1:], TOOLS))
    assert chain_hashes(other, 16)[0] != h_full[0]


def test_template_layout():
    text = render_chat(
        [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "x", "type": "function", "function": {"name": "search", "arguments": '{"q": "a"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "x", "content": "result"},
        ],
        TOOLS,
    )
    assert text.startswith(f"{IM_START}system\nYou are a helpful assistant.\n\n# Tools")
    assert json.dumps(TOOLS[0]) in text
    assert f"{IM_START}user\nhi{IM_END}\n" in text
    assert '<tool_call>\n{"name": "search", "arguments": {"q": "a"}}\n</tool_call>' in text
    assert "<tool_response>\nresult\n</tool_response>" in text
    assert text.endswith(GENERATION_PROMPT)
    assert not render_chat([{"role": "user", "content": "x"}]).startswith(f"{IM_START}system")


def test_generated_answer_rerenders_to_the_same_tokens():
    """prompt + generated tokens == the next turn's rendering of that assistant message."""
    t = SimTokenizer()
    msgs = [{"role": "system", "content": "S " * 30}, {"role": "user", "content": "question"}]
    for share, kind in ((0.0, "stop"), (1.0, "tool_calls")):
        prompt = t.encode(render_chat(msgs, TOOLS))
        out = plan_output(t, prompt, 400, output_tokens=40, tools=TOOLS, tool_call_share=share)
        assert out.finish_reason == kind
        if kind == "stop":
            assistant = {"role": "assistant", "content": out.text}
        else:
            name, args = out.tool_call
            assistant = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}],
            }
        nxt = t.encode(render_chat(msgs + [assistant, {"role": "user", "content": "next"}], TOOLS))
        assert nxt[: len(prompt) + len(out.ids)] == prompt + list(out.ids)


def test_generation_is_deterministic_and_respects_max_tokens():
    t = SimTokenizer()
    a = plan_output(t, [5, 6, 7], 1000, output_tokens=50, seed=3)
    b = plan_output(t, [5, 6, 7], 1000, output_tokens=50, seed=3)
    c = plan_output(t, [5, 6, 8], 1000, output_tokens=50, seed=3)
    assert a == b and a.text != c.text
    assert 25 <= len(a.ids) - 1 <= 75 and a.ids[-1] == t.eos_id
    cut = plan_output(t, [5, 6, 7], 4, output_tokens=50)
    assert cut.finish_reason == "length" and len(cut.ids) == 4 and t.eos_id not in cut.ids
    assert len(plan_output(t, [1], 33, ignore_eos=True).ids) == 33
    assert plan_output(t, [1], 1).finish_reason == "length"


def test_tool_call_share_is_roughly_honoured():
    t = SimTokenizer()
    calls = sum(
        plan_output(t, [i, i + 1], 300, tools=TOOLS, tool_call_share=0.3).finish_reason == "tool_calls"
        for i in range(400)
    )
    assert 80 <= calls <= 160
    assert plan_output(t, [1], 300, tools=TOOLS, tool_choice="none", tool_call_share=1.0).tool_call is None
    forced = plan_output(t, [1], 300, tools=TOOLS, tool_choice="required", tool_call_share=0.0)
    assert forced.tool_call[0] == "search" and set(json.loads(forced.tool_call[1])) == {"q", "k"}
    assert render_tool_call("f", '{"a": 1}') == render_tool_call("f", {"a": 1})
