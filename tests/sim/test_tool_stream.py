"""A generated tool call's stream: which token completes the name, which carry the arguments."""

from proxy.simengine.chat_template import render_tool_call
from proxy.simengine.generation import Output
from proxy.simengine.tool_stream import ToolCallStream


def output(name: str, args: str, piece: int = 3) -> Output:
    text = render_tool_call(name, args)
    pieces = tuple(text[i : i + piece] for i in range(0, len(text), piece)) + ("",)
    return Output(tuple(range(len(pieces))), pieces, "".join(pieces), "tool_calls", (name, args))


def test_the_name_goes_once_its_closing_quote_is_generated_then_the_arguments_as_generated():
    args = '{"path": "src/app.py", "line": 12}'
    out = output("read_file", args)
    s = ToolCallStream(out)
    end = out.text.index('"read_file"') + len('"read_file"')
    sent: list[dict] = []
    chars = 0
    for k in range(1, len(out.pieces)):
        got = s.advance(k)
        before = chars
        chars += len(out.pieces[k - 1])
        names = [d for d in got if "name" in d["function"]]
        if before < end <= chars:
            assert names and names[0]["function"] == {"name": "read_file"} and names[0]["type"] == "function"
        else:
            assert not names
        sent += got
    sent += s.advance(len(out.pieces), done=True)
    assert sum(1 for d in sent if "name" in d["function"]) == 1
    assert "".join(d["function"].get("arguments", "") for d in sent) == args
    # the arguments began before the answer ended: a client sees the call while it is generated
    assert len([d for d in sent if "arguments" in d["function"]]) > 3


def test_an_answer_not_in_the_rendered_shape_is_sent_whole_at_the_end():
    out = Output((1, 2), ("{", "}"), "{}", "tool_calls", ("f", '{"a": 1}'))
    s = ToolCallStream(out)
    assert s.advance(1) == []
    sent = s.advance(2) + s.advance(2, done=True)
    assert sent[0]["function"] == {"name": "f"} and sent[1]["function"] == {"arguments": '{"a": 1}'}
