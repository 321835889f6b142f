"""ChatML chat template (Qwen-2.5 style, with tools) for the simulated engine.

Why it matters: prefix caching works on the *rendered* prompt. Like a real template, this one
renders tools inside the system turn (first), then each message as its own
`<|im_start|>role\\n…<|im_end|>\\n` block, so equal message prefixes give equal token prefixes, and
the rendering of an assistant turn equals the tokens the engine generated for it (text + `<|im_end|>`),
so a follow-up turn hits on the previous answer's blocks, as it does in vLLM.

Layout:
    <|im_start|>system\\n{system text}[\\n\\n# Tools\\n…<tools>\\n{one JSON per tool}\\n</tools>…]<|im_end|>\\n
    <|im_start|>user\\n{text}<|im_end|>\\n
    <|im_start|>assistant\\n{text}[\\n]<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call><|im_end|>\\n
    <|im_start|>user\\n<tool_response>\\n{tool text}\\n</tool_response><|im_end|>\\n     (role "tool")
    <|im_start|>assistant\\n                                             (add_generation_prompt)
When tools are given and there is no system message, a default system text opens the prompt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.simengine.tokenizer import IM_END, IM_START

DEFAULT_SYSTEM = "You are a helpful assistant."
TOOLS_HEADER = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\n</tool_call>'
)
GENERATION_PROMPT = f"{IM_START}assistant\n"


class TemplateError(ValueError):
    """The request's messages cannot be rendered (maps to an HTTP 400)."""


def content_text(content: Any) -> str:
    """OpenAI content: a string, None, or a list of parts; non-text parts become a placeholder."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, Mapping):
                if part.get("type") == "text":
                    out.append(str(part.get("text", "")))
                else:
                    out.append(f"<|{part.get('type', 'part')}|>")
            elif isinstance(part, str):
                out.append(part)
        return "".join(out)
    raise TemplateError("message content must be a string or a list of content parts")


def render_tool_call(name: str, arguments: Any) -> str:
    """One tool call exactly as the engine generates it (and as the template re-renders it)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass  # keep the raw string, as a lenient template would
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


def render_tools(tools: Sequence[Any]) -> str:
    lines = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            raise TemplateError("each tool must be an object")
        lines.append("\n" + json.dumps(tool, ensure_ascii=False))
    return TOOLS_HEADER + "".join(lines) + TOOLS_FOOTER


def _assistant_body(msg: Mapping) -> str:
    text = content_text(msg.get("content"))
    calls = msg.get("tool_calls") or []
    parts = [text] if text else []
    for call in calls:
        if not isinstance(call, Mapping):
            raise TemplateError("tool_calls entries must be objects")
        fn = call.get("function") or {}
        parts.append(render_tool_call(str(fn.get("name", "")), fn.get("arguments", {})))
    return "\n".join(parts)


def render_chat(
    messages: Sequence[Any],
    tools: Sequence[Any] | None = None,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
) -> str:
    """Render an OpenAI messages list (plus tools) to the prompt text. ``continue_final_message``
    (vLLM's flag) leaves the last message open: no end-of-turn, no generation prompt."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise TemplateError("messages must be a list")
    out: list[str] = []
    rest = list(messages)
    tools = list(tools or [])
    if rest and isinstance(rest[0], Mapping) and rest[0].get("role") in ("system", "developer"):
        system = content_text(rest[0].get("content"))
        rest = rest[1:]
        has_system = True
    else:
        system, has_system = DEFAULT_SYSTEM, False
    if tools:
        out.append(f"{IM_START}system\n{system}{render_tools(tools)}{IM_END}\n")
    elif has_system:
        out.append(f"{IM_START}system\n{system}{IM_END}\n")
    for msg in rest:
        if not isinstance(msg, Mapping) or "role" not in msg:
            raise TemplateError("each message must be an object with a role")
        role = msg["role"]
        if role == "assistant":
            body = _assistant_body(msg)
        elif role == "tool":
            role, body = "user", f"<tool_response>\n{content_text(msg.get('content'))}\n</tool_response>"
        elif role in ("user", "system", "developer"):
            body = content_text(msg.get("content"))
        else:
            raise TemplateError(f"unknown message role {role!r}")
        out.append(f"{IM_START}{role}\n{body}{IM_END}\n")
    if continue_final_message and rest and out:
        out[-1] = out[-1][: -len(IM_END) - 1]
        return "".join(out)
    if add_generation_prompt:
        out.append(GENERATION_PROMPT)
    return "".join(out)
