"""Request validation and response shapes of the sim server (OpenAI / vLLM wire format).

Why separate: keeps server.py to routing and streaming. Validation mirrors vLLM's 400s (missing
model, bad types, prompt longer than the context, n > 1 unsupported here); unknown fields are
ignored, as vLLM does. Errors use vLLM's envelope {"error": {"message", "type", "param", "code"}}.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, overload

from proxy.simengine.chat_template import TemplateError, render_chat
from proxy.simengine.generation import Output
from proxy.simengine.tokenizer import SimTokenizer


class ApiError(Exception):
    def __init__(self, message: str, status: int = 400, param: str | None = None):
        super().__init__(message)
        self.status, self.param = status, param

    def body(self) -> dict:
        kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(
            self.status, "InternalServerError"
        )
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.status}}


@dataclass(frozen=True, slots=True)
class Job:
    kind: str  # "chat" | "completion"
    prompt_ids: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool
    salt: str | None
    priority: int
    tools: tuple
    tool_choice: Any
    ignore_eos: bool
    min_tokens: int
    session_id: str | None = None  # SGLang's top-level `session_id` (session radix cache)


@overload
def _int(body: Mapping, key: str, default: int, lo: int | None = None) -> int: ...
@overload
def _int(body: Mapping, key: str, default: None, lo: int | None = None) -> int | None: ...
def _int(body: Mapping, key: str, default: int | None, lo: int | None = None) -> int | None:
    """An optional integer field; with an int `default` the result is always an int."""
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ApiError(f"'{key}' must be an integer", param=key)
    if lo is not None and v < lo:
        raise ApiError(f"{key} must be at least {lo}, got {v}.", param=key)
    return v


PRIORITY_HEADER = "x-vllm-priority"
SESSION_HEADER = "x-session-id"


def header_priority(headers: Mapping[str, str], body_priority: int) -> int:
    """vLLM 0.32: `X-Vllm-Priority` (an integer) overrides the body's `priority`; not an integer: 400."""
    raw = headers.get(PRIORITY_HEADER)
    if raw is None:
        return body_priority
    try:
        return int(raw.strip())
    except ValueError:
        raise ApiError(f"'{PRIORITY_HEADER}' header must be an integer, got {raw[:32]!r}", param="priority") from None


def request_session_id(body: Any, headers: Mapping[str, str]) -> str | None:
    """The session id vLLM 0.32 reads: body `session_id`, then `X-Session-ID`, then
    `vllm_xargs.session_id` (the order among them is this simulator's; vLLM's for requests carrying
    several different ones was not checked)."""
    if isinstance(body, Mapping):
        sid = body.get("session_id")
        if isinstance(sid, str) and sid:
            return sid
    sid = headers.get(SESSION_HEADER)
    if sid:
        return sid
    xargs = body.get("vllm_xargs") if isinstance(body, Mapping) else None
    sid = xargs.get("session_id") if isinstance(xargs, Mapping) else None
    return sid if isinstance(sid, str) and sid else None


def check_model(body: Any, served: str, required: bool = True) -> None:
    if not isinstance(body, Mapping):
        raise ApiError("request body must be a JSON object")
    model = body.get("model")
    if model is None:
        if required:
            raise ApiError("'model' is required", param="model")
        return
    if model != served:
        raise ApiError(f"The model `{model}` does not exist.", 404, "model")


def _tools(body: Mapping) -> tuple[tuple, Any]:
    tools = body.get("tools") or []
    if not isinstance(tools, list) or any(
        not isinstance(t, Mapping)
        or not isinstance(t.get("function"), Mapping)
        or not isinstance(t["function"].get("name"), str)
        for t in tools
    ):
        raise ApiError("'tools' must be a list of {type: function, function: {name, ...}}", param="tools")
    choice = body.get("tool_choice", "auto" if tools else "none")
    if isinstance(choice, Mapping):
        name = (choice.get("function") or {}).get("name")
        if name not in {t["function"]["name"] for t in tools}:
            raise ApiError(f"tool_choice names an unknown function {name!r}", param="tool_choice")
    elif choice not in ("none", "auto", "required"):
        raise ApiError("tool_choice must be 'none', 'auto', 'required' or a named function", param="tool_choice")
    elif choice == "required" and not tools:
        raise ApiError("tool_choice 'required' needs tools", param="tool_choice")
    return tuple(tools), choice


def chat_prompt_ids(tok: SimTokenizer, body: Mapping, add_generation_prompt: bool = True) -> list[int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("'messages' must be a non-empty list", param="messages")
    tools, _ = _tools(body)
    cont = bool(body.get("continue_final_message", False))
    if cont and add_generation_prompt and "add_generation_prompt" in body:
        raise ApiError(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            param="continue_final_message",
        )
    try:
        text = render_chat(messages, tools, add_generation_prompt and not cont, cont)
    except TemplateError as exc:
        raise ApiError(str(exc), param="messages") from exc
    return tok.encode(text)


def completion_prompt_ids(tok: SimTokenizer, body: Mapping) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        if not prompt:
            raise ApiError("prompt must not be empty", param="prompt")
        return tok.encode(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        bad = next((t for t in prompt if not tok.valid_id(t)), None)
        if bad is not None:
            raise ApiError(f"Token id {bad} is out of vocabulary", param="prompt")
        return list(prompt)
    if isinstance(prompt, list) and len(prompt) > 1:
        raise ApiError("batched prompts are not supported by the simulated engine", param="prompt")
    raise ApiError("'prompt' must be a string or a list of token ids", param="prompt")


def parse_job(kind: str, body: Mapping, tok: SimTokenizer, max_model_len: int) -> Job:
    if kind == "chat":
        prompt_ids = chat_prompt_ids(tok, body, bool(body.get("add_generation_prompt", True)))
        tools, choice = _tools(body)
        max_tokens = _int(body, "max_completion_tokens", None, 1)
        if max_tokens is None:
            max_tokens = _int(body, "max_tokens", None, 1)
    else:
        prompt_ids = completion_prompt_ids(tok, body)
        tools, choice = (), "none"
        max_tokens = _int(body, "max_tokens", 16, 1)  # OpenAI completions default
    n = _int(body, "n", 1, 1)
    if n != 1:
        raise ApiError("n > 1 is not supported by the simulated engine", param="n")
    p = len(prompt_ids)
    if max_tokens is None:
        max_tokens = max_model_len - p
    if p + max_tokens > max_model_len or max_tokens < 1:
        raise ApiError(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{p + max(max_tokens, 0)} tokens ({p} in the messages, {max_tokens} in the completion). "
            "Please reduce the length of the messages or completion.",
            param="max_tokens",
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError("'stream' must be a boolean", param="stream")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, Mapping):
        raise ApiError("'stream_options' must be an object", param="stream_options")
    if opts and not stream:
        raise ApiError("Stream options can only be defined when `stream=True`.", param="stream_options")
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise ApiError("Parameter 'cache_salt' must be a non-empty string if provided.", param="cache_salt")
    return Job(
        kind,
        prompt_ids,
        max_tokens,
        stream,
        bool(stream and opts.get("include_usage")),
        salt,
        _int(body, "priority", 0),
        tools,
        choice,
        bool(body.get("ignore_eos", False)),
        _int(body, "min_tokens", 0, 0),
        _session_id(body),
    )


def parse_generate(body: Any, tok: SimTokenizer, max_model_len: int) -> Job:
    """SGLang POST /generate: {"text" | "input_ids", "sampling_params": {"max_new_tokens", ...}}."""
    if not isinstance(body, Mapping):
        raise ApiError("request body must be a JSON object")
    if body.get("stream"):
        raise ApiError("streaming /generate is not supported by the simulated engine", param="stream")
    if "input_ids" in body:
        prompt_ids = completion_prompt_ids(tok, {"prompt": body["input_ids"]})
    elif isinstance(body.get("text"), str) and body["text"]:
        prompt_ids = tok.encode(body["text"])
    else:
        raise ApiError("either 'text' or 'input_ids' is required", param="text")
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, Mapping):
        raise ApiError("'sampling_params' must be an object", param="sampling_params")
    max_tokens = _int(sp, "max_new_tokens", 128, 1)
    if len(prompt_ids) + max_tokens > max_model_len:
        raise ApiError(
            f"The input ({len(prompt_ids)} tokens) plus max_new_tokens exceeds the maximum "
            f"context length ({max_model_len} tokens).",
            param="input_ids",
        )
    return Job(
        "completion",
        prompt_ids,
        max_tokens,
        False,
        False,
        None,
        _int(body, "priority", 0),
        (),
        "none",
        bool(sp.get("ignore_eos", False)),
        _int(sp, "min_new_tokens", 0, 0),
        _session_id(body),
    )


def _session_id(body: Mapping) -> str | None:
    """SGLang's top-level `session_id` (a non-empty string; `GenerateReqInput.session_id`, also on its
    OpenAI-compatible requests). SGLang refuses it beside `session_params` (mutually exclusive)."""
    sid = body.get("session_id")
    if sid is None:
        return None
    if not isinstance(sid, str) or not sid:
        raise ApiError("'session_id' must be a non-empty string", param="session_id")
    if body.get("session_params") is not None:
        raise ApiError("session_id and session_params are mutually exclusive", param="session_id")
    return sid


def usage(prompt: int, completion: int, cached: int, details: bool) -> dict:
    u: dict = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
    u["prompt_tokens_details"] = {"cached_tokens": cached} if details else None
    return u


def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex


def tool_call_id() -> str:
    """A chat tool call's id, in vLLM's shape (`chatcmpl-tool-` + 24 hex digits)."""
    return "chatcmpl-tool-" + uuid.uuid4().hex[:24]


def tool_calls_json(out: Output) -> list[dict]:
    if out.tool_call is None:
        return []
    name, args = out.tool_call
    return [{"id": tool_call_id(), "type": "function", "function": {"name": name, "arguments": args}}]


def full_response(job: Job, rid: str, model: str, out: Output, n_out: int, u: dict) -> dict:
    created = int(time.time())
    text = "".join(out.pieces[:n_out])
    if job.kind == "completion":
        return {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {"index": 0, "text": text, "logprobs": None, "finish_reason": out.finish_reason, "stop_reason": None}
            ],
            "usage": u,
        }
    calls = tool_calls_json(out)
    msg = {"role": "assistant", "content": None if calls else text, "tool_calls": calls}
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": msg, "logprobs": None, "finish_reason": out.finish_reason, "stop_reason": None}
        ],
        "usage": u,
    }


def stream_chunk(
    job: Job,
    rid: str,
    model: str,
    created: int,
    *,
    text: str | None = None,
    delta: dict | None = None,
    finish: str | None = None,
    u: dict | None = None,
    empty_choices: bool = False,
) -> dict:
    obj = "chat.completion.chunk" if job.kind == "chat" else "text_completion"
    chunk: dict = {"id": rid, "object": obj, "created": created, "model": model}
    if empty_choices:
        chunk["choices"] = []
    elif job.kind == "chat":
        chunk["choices"] = [
            {
                "index": 0,
                "delta": delta if delta is not None else {"content": text or ""},
                "logprobs": None,
                "finish_reason": finish,
            }
        ]
    else:
        chunk["choices"] = [
            {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish, "stop_reason": None}
        ]
    if u is not None:
        chunk["usage"] = u
    return chunk


def tokenize_body(body: Any, tok: SimTokenizer, max_model_len: int) -> dict:
    """vLLM POST /tokenize: {prompt} or {messages, add_generation_prompt?, tools?}."""
    if not isinstance(body, Mapping):
        raise ApiError("request body must be a JSON object")
    if "messages" in body:
        agp = body.get("add_generation_prompt", True)
        ids = chat_prompt_ids(tok, body, add_generation_prompt=bool(agp))
    elif isinstance(body.get("prompt"), str):
        ids = tok.encode(body["prompt"])
    else:
        raise ApiError("either 'prompt' (string) or 'messages' is required", param="prompt")
    strs = [tok.decode([i]) for i in ids] if body.get("return_token_strs") else None
    return {"count": len(ids), "max_model_len": max_model_len, "tokens": ids, "token_strs": strs}


def detokenize_body(body: Any, tok: SimTokenizer) -> dict:
    tokens = body.get("tokens") if isinstance(body, Mapping) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) and tok.valid_id(t) for t in tokens):
        raise ApiError("'tokens' must be a list of token ids", param="tokens")
    return {"prompt": tok.decode(tokens)}


def models_body(model: str, max_model_len: int, created: int) -> dict:
    return {
        "object": "list",
        "data": [
            {
                "id": model,
                "object": "model",
                "created": created,
                "owned_by": "cachescout-sim",
                "root": model,
                "parent": None,
                "max_model_len": max_model_len,
                "permission": [],
            }
        ],
    }
