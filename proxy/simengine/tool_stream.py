"""A generated tool call streamed as vLLM streams it: the name as soon as it is generated, then the
arguments as their tokens arrive.

Why: a client's time to first token on a tool-call answer is when the first ``tool_calls`` delta
reaches it. vLLM's Hermes parser (``vllm/entrypoints/openai/tool_parsers/hermes_tool_parser.py``,
``extract_tool_calls_streaming``) sends a delta with the call's ``id``, ``type`` and function
``name`` once the partial JSON after ``<tool_call>`` holds the whole name (strings are parsed only
when complete until the name is sent), then each new piece of the arguments as
``{"index": 0, "function": {"arguments": ...}}``. Sending the whole call only when the answer ends,
as this engine did, made a tool-call answer's first token arrive after its last one: the demo's
client-side TTFT then carried every tool call's full decode time.

The engine generates ``<tool_call>\\n{"name": N, "arguments": A}\\n</tool_call>``
(``chat_template.render_tool_call``); the offsets of N's end and of A in that text say which
generated token completes the name and which carry the arguments.
"""

from __future__ import annotations

import json

from proxy.simengine.generation import Output
from proxy.simengine.openai_io import tool_call_id


class ToolCallStream:
    """The ``tool_calls`` deltas of one answer, in the order its tokens are generated."""

    def __init__(self, out: Output) -> None:
        assert out.tool_call is not None, "a tool-call answer"
        name, args = out.tool_call
        self.name, self.args = name, args
        self.pieces = out.pieces
        text = out.text
        head = '"name": ' + json.dumps(name, ensure_ascii=False)
        at = text.find(head)
        lead = ', "arguments": '
        if at < 0 or text[at + len(head) : at + len(head) + len(lead) + len(args)] != lead + args:
            # not the rendering above: the whole call at the end, as before (never a wrong delta)
            self.name_end, self.args_start = len(text), len(text)
        else:
            self.name_end = at + len(head)
            self.args_start = self.name_end + len(lead)
        self.id = tool_call_id()
        self._tokens = 0  # generated tokens seen
        self._chars = 0  # their text's length
        self._name_sent = False
        self._args_sent = 0  # argument characters sent

    def advance(self, generated: int, done: bool = False) -> list[dict]:
        """The deltas that the tokens generated so far complete (all that is left when ``done``)."""
        pieces = self.pieces
        while self._tokens < min(generated, len(pieces)):
            self._chars += len(pieces[self._tokens])
            self._tokens += 1
        out: list[dict] = []
        if not self._name_sent and (done or self._chars >= self.name_end):
            self._name_sent = True
            out.append({"index": 0, "id": self.id, "type": "function", "function": {"name": self.name}})
        if self._name_sent:
            upto = len(self.args) if done else max(0, min(len(self.args), self._chars - self.args_start))
            if upto > self._args_sent:
                out.append({"index": 0, "function": {"arguments": self.args[self._args_sent : upto]}})
                self._args_sent = upto
        return out
