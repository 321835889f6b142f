"""Deterministic output for the simulated engine: filler text and tool calls.

Why deterministic: tests and replays must see the same answer for the same prompt (like greedy
decoding), and agent loops need tool calls they can follow. The seed mixes the prompt's token ids
with the engine seed, so equal prompts give equal answers.

Length: ~`output_tokens` × (1 ± `output_jitter`) tokens, then `<|im_end|>` (finish "stop"), cut at
`max_tokens` (finish "length", no end token). `ignore_eos` generates exactly `max_tokens`.
Tool calls: when the request offers tools and `tool_choice` is not "none", a share
`tool_call_share` of answers (always, for "required" or a named function) is one tool call, with
arguments filled from the tool's JSON schema, rendered exactly as the chat template re-renders it.
"""

from __future__ import annotations

import json
import random
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import xxhash

from proxy.simengine.chat_template import render_tool_call
from proxy.simengine.tokenizer import SimTokenizer

WORDS = (
    "the",
    "cache",
    "agent",
    "plan",
    "step",
    "result",
    "check",
    "value",
    "next",
    "answer",
    "token",
    "prefix",
    "block",
    "warm",
    "reuse",
    "model",
    "query",
    "tool",
    "state",
    "order",
    "data",
    "list",
    "final",
    "review",
    "update",
    "branch",
    "memory",
    "signal",
    "route",
    "batch",
    "queue",
    "score",
    "and",
    "of",
    "to",
    "is",
    "for",
    "with",
    "then",
    "so",
    "we",
    "it",
    "on",
    "in",
    "a",
    "by",
)


@dataclass(frozen=True, slots=True)
class Output:
    ids: tuple[int, ...]
    pieces: tuple[str, ...]  # text of each token ("" for the end token)
    text: str  # the visible text (no end token)
    finish_reason: str  # "stop" | "length" | "tool_calls"
    tool_call: tuple[str, str] | None  # (name, arguments JSON) when finish_reason == "tool_calls"


def prompt_seed(prompt_ids: Sequence[int], seed: int) -> int:
    h = xxhash.xxh64(array("I", [i & 0xFFFFFFFF for i in prompt_ids]).tobytes(), seed=seed & 0xFFFFFFFFFFFFFFFF)
    return h.intdigest()


def _filler(rng: random.Random, n_tokens: int) -> list[str]:
    """Pieces of `n_tokens` filler tokens: one word or one '.' per token, sentences of 6–14 words."""
    out: list[str] = []
    sentence = 0
    target = rng.randint(6, 14)
    while len(out) < n_tokens:
        if sentence >= target:
            out.append(".")
            sentence, target = 0, rng.randint(6, 14)
            continue
        word = rng.choice(WORDS)
        if sentence == 0:
            word = word.capitalize()
        out.append(word if not out else " " + word)
        sentence += 1
    return out


def _arg_value(schema: Any, rng: random.Random) -> Any:
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(schema, Mapping) and schema.get("enum"):
        return schema["enum"][0]
    if kind == "integer":
        return rng.randint(1, 100)
    if kind == "number":
        return round(rng.uniform(0, 100), 2)
    if kind == "boolean":
        return bool(rng.getrandbits(1))
    if kind == "array":
        return [" ".join(rng.choice(WORDS) for _ in range(2))]
    if kind == "object":
        return {}
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5)))


def tool_arguments(tool: Mapping, rng: random.Random) -> dict:
    params = (tool.get("function") or {}).get("parameters") or {}
    props = params.get("properties") or {}
    required = params.get("required") or list(props)[:3]
    return {name: _arg_value(props.get(name, {}), rng) for name in required if name in props} or (
        {"query": _arg_value({}, rng)} if not props else {}
    )


def choose_tool(tools: Sequence[Any], tool_choice: Any, rng: random.Random, share: float) -> Mapping | None:
    """The tool this answer calls, or None for a text answer."""
    if not tools or tool_choice == "none":
        return None
    if isinstance(tool_choice, Mapping):
        name = (tool_choice.get("function") or {}).get("name")
        return next((t for t in tools if (t.get("function") or {}).get("name") == name), None)
    if tool_choice != "required" and rng.random() >= share:
        return None
    return tools[rng.randrange(len(tools))]


def plan_output(
    tok: SimTokenizer,
    prompt_ids: Sequence[int],
    max_tokens: int,
    *,
    output_tokens: int = 128,
    output_jitter: float = 0.5,
    seed: int = 0,
    tools: Sequence[Any] | None = None,
    tool_choice: Any = "auto",
    tool_call_share: float = 0.0,
    ignore_eos: bool = False,
    min_tokens: int = 0,
) -> Output:
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    rng = random.Random(prompt_seed(prompt_ids, seed))
    tool = choose_tool(list(tools or []), tool_choice, rng, tool_call_share)
    if tool is not None and not ignore_eos:
        name = str((tool.get("function") or {}).get("name", ""))
        args = json.dumps(tool_arguments(tool, rng), ensure_ascii=False)
        ids, pieces = tok.encode_with_pieces(render_tool_call(name, args))
        if len(ids) + 1 <= max_tokens:
            return Output(
                tuple(ids) + (tok.eos_id,), tuple(pieces) + ("",), "".join(pieces), "tool_calls", (name, args)
            )
        ids, pieces = ids[:max_tokens], pieces[:max_tokens]
        return Output(tuple(ids), tuple(pieces), "".join(pieces), "length", None)
    if ignore_eos:
        n_text, stop = max_tokens, False
    else:
        lo = max(1, round(output_tokens * (1 - output_jitter)))
        hi = max(lo, round(output_tokens * (1 + output_jitter)))
        natural = max(rng.randint(lo, hi), min_tokens)  # text tokens before the end token
        stop = natural + 1 <= max_tokens
        n_text = natural if stop else max_tokens
    pieces = _filler(rng, n_text)
    ids = [tok.piece_id(p) for p in pieces]
    text = "".join(pieces)
    if stop:
        return Output(tuple(ids) + (tok.eos_id,), tuple(pieces) + ("",), text, "stop", None)
    return Output(tuple(ids), tuple(pieces), text, "length", None)
