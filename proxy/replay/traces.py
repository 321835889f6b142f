"""Trace loaders: every supported trace format becomes one stream of `ReplayRequest`s.

Why one stream: the replay evaluator, its policies and its measurements must not care where a
request came from. A loader turns a file into requests ordered by arrival time, each carrying the
chained block hashes and per-block token counts the simulated cache needs, plus whatever labels the
format offers (session, category, finish reason) for the policies that learn from them.

Formats (one JSON object a line):
- `mooncake`: `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (512-token blocks,
  already chained);
- `bailian` (Qwen-Bailian, "KVCache Cache in the Wild"): `chat_id`, `parent_chat_id`, `timestamp`
  (s), `input_length`, `output_length`, `type`, `turn`, `hash_ids` (16-token blocks);
- `lmcache` (LMCache agent traces): `timestamp` (s), `input` prompt text, `output`, `session_id`;
- `openai` (OpenAI request logs): a request body (`messages` or `prompt`; a Responses-API body with
  `input`; any body with its `path`, e.g. `/v1/messages`), with `timestamp` (s) at top level or the
  body under `body`/`request`.

A line that is not a JSON object, or misses what its format needs, is *counted* in
`LoadResult.malformed` (with a few examples) — never silently dropped, never fatal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash

FORMATS = ("mooncake", "bailian", "lmcache", "openai")
MOONCAKE_BLOCK = 512
BAILIAN_BLOCK = 16
TEXT_BLOCK = 16  # tokens per block for text traces (lmcache/openai)
CHARS_PER_TOKEN = 4  # text traces carry no token ids: a stable, tokenizer-free estimate
MAX_EXAMPLES = 5


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """One client request as the replay sees it. Times are seconds from the trace start."""

    t: float
    tenant: str
    block_hashes: tuple[int, ...]
    block_tokens: tuple[int, ...]
    output_tokens: int = 0
    session_id: str | None = None
    agent: str | None = None  # ground-truth agent label (measurement only; policies learn their own)
    category: str = ""  # workload category (the history baseline learns per category)
    anchor_blocks: int = 0  # leading blocks that are the agent's fixed context (0 = unknown)
    finish_reason: str | None = None  # "tool_calls" when the session pauses for a tool
    tool_seconds: float | None = None  # how long the tool ran (ground truth, for measurement)
    model: str = ""
    anchor_payload: Any = None
    header_blocks: int = 0  # leading envelope blocks (model + tools) of a canonical chat view

    @property
    def prompt_tokens(self) -> int:
        return sum(self.block_tokens)


@dataclass
class LoadResult:
    """A loaded trace: requests in time order, plus what could not be read."""

    requests: list[ReplayRequest]
    format: str
    block_size: int
    lines: int = 0
    malformed: int = 0
    malformed_examples: list[tuple[int, str]] = field(default_factory=list)

    def note(self, lineno: int, why: str) -> None:
        self.malformed += 1
        if len(self.malformed_examples) < MAX_EXAMPLES:
            self.malformed_examples.append((lineno, why))

    @property
    def unique_blocks(self) -> int:
        seen: set[int] = set()
        for r in self.requests:
            seen.update(r.block_hashes)
        return len(seen)


class Malformed(ValueError):
    """A line that does not fit its format (message says why)."""


def block_tokens_for(input_length: int, n_blocks: int, block_size: int) -> tuple[int, ...]:
    """Per-block token counts: full blocks, then the partial last block."""
    if n_blocks <= 0:
        return ()
    last = input_length - block_size * (n_blocks - 1)
    if last <= 0 or last > block_size:
        last = block_size  # lengths disagree with the ids: trust the ids, count full blocks
    return (block_size,) * (n_blocks - 1) + (last,)


def _num(obj: dict, key: str, kind=float) -> Any:
    if key not in obj:
        raise Malformed(f"missing {key!r}")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Malformed(f"{key!r} is not a number")
    return kind(v)


def _hash_ids(obj: dict) -> tuple[int, ...]:
    ids = obj.get("hash_ids")
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
        raise Malformed("'hash_ids' missing or not a list of integers")
    return tuple(ids)


# ---------------------------------------------------------------------------------------- parsers
def parse_mooncake(obj: dict) -> ReplayRequest:
    ids = _hash_ids(obj)
    t = _num(obj, "timestamp") / 1000.0
    n_in = _num(obj, "input_length", int)
    return ReplayRequest(
        t=t,
        tenant="",
        block_hashes=ids,
        block_tokens=block_tokens_for(n_in, len(ids), MOONCAKE_BLOCK),
        output_tokens=int(obj.get("output_length", 0) or 0),
    )


def _bailian_parser():
    """Bailian sessions are parent chains: the session is the root chat id (resolved online)."""
    root: dict[Any, Any] = {}

    def parse(obj: dict) -> ReplayRequest:
        ids = _hash_ids(obj)
        if "chat_id" not in obj:
            raise Malformed("missing 'chat_id'")
        chat, parent = obj["chat_id"], obj.get("parent_chat_id", -1)
        session = root.get(parent, parent) if parent not in (None, -1, "") else chat
        root[chat] = session
        n_in = _num(obj, "input_length", int) if "input_length" in obj else BAILIAN_BLOCK * len(ids)
        kind = str(obj.get("type", ""))
        return ReplayRequest(
            t=_num(obj, "timestamp"),
            tenant="",
            block_hashes=ids,
            block_tokens=block_tokens_for(n_in, len(ids), BAILIAN_BLOCK),
            output_tokens=int(obj.get("output_length", 0) or 0),
            session_id=str(session),
            category=kind,
        )

    return parse


def text_blocks(text: str, block_size: int = TEXT_BLOCK, salt: str = "") -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Chained xxh3_64 hashes over fixed character windows (≈ `block_size` tokens each).
    Equal text prefix -> equal hash chain, which is all prefix caching needs."""
    width = block_size * CHARS_PER_TOKEN
    hashes: list[int] = []
    tokens: list[int] = []
    parent = xxhash.xxh3_64_intdigest(salt.encode())
    for i in range(0, len(text), width):
        chunk = text[i : i + width]
        parent = xxhash.xxh3_64_intdigest(chunk.encode("utf-8", "surrogatepass"), seed=parent)
        hashes.append(parent)
        tokens.append(max(1, -(-len(chunk) // CHARS_PER_TOKEN)))
    return tuple(hashes), tuple(tokens)


def parse_lmcache(obj: dict) -> ReplayRequest:
    text = obj.get("input")
    if not isinstance(text, str):
        raise Malformed("'input' missing or not a string")
    hashes, tokens = text_blocks(text)
    out = obj.get("output")
    out_tokens = len(out) // CHARS_PER_TOKEN if isinstance(out, str) else 0
    sid = obj.get("session_id")
    return ReplayRequest(
        t=_num(obj, "timestamp"),
        tenant="",
        block_hashes=hashes,
        block_tokens=tokens,
        output_tokens=out_tokens,
        session_id=None if sid is None else str(sid),
    )


def _render_messages(body: dict) -> str:
    """A stable text rendering of a chat body (roles, contents, tool calls, tools)."""
    parts: list[str] = []
    if "tools" in body:
        parts.append("<tools>" + json.dumps(body["tools"], sort_keys=True, separators=(",", ":")))
    for m in body["messages"]:
        if not isinstance(m, dict):
            raise Malformed("a message is not an object")
        content = m.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, sort_keys=True, separators=(",", ":"))
        parts.append(f"<|{m.get('role', '')}|>{content}")
        if m.get("tool_calls"):
            parts.append(json.dumps(m["tool_calls"], sort_keys=True, separators=(",", ":")))
    return "\n".join(parts)


def parse_openai(obj: dict) -> ReplayRequest:
    """A logged request body. Blocks come from the live proxy's own canonical view
    (`proxy.core.fingerprint.view_from_openai`), so the replay's scout policies see exactly the chain,
    anchor and session the live proxy would; bodies it cannot read fall back to a plain text chain."""
    body = obj.get("body", obj.get("request", obj))
    if not isinstance(body, dict):
        raise Malformed("request body is not an object")
    t = _num(obj, "timestamp") if "timestamp" in obj else _num(body, "timestamp")
    logged_path = obj.get("path") if isinstance(obj.get("path"), str) else None
    if logged_path is None and "input" in body:
        logged_path = "/v1/responses"  # Responses API body: instructions + input items
    if logged_path is None and not isinstance(body.get("messages"), list) and not isinstance(body.get("prompt"), str):
        raise Malformed("body has neither 'messages' nor a string 'prompt'")
    headers = obj.get("headers") if isinstance(obj.get("headers"), dict) else {}
    path = logged_path or ("/v1/chat/completions" if "messages" in body else "/v1/completions")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    out_tokens = int(max_tokens) if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else 0
    sid = obj.get("session_id", body.get("user"))
    view = _core_view(path, body, headers)
    if view is not None:
        return ReplayRequest(
            t=t,
            tenant=view.tenant,
            block_hashes=view.block_hashes,
            block_tokens=view.block_tokens,
            output_tokens=out_tokens,
            session_id=view.session_id or (None if sid is None else str(sid)),
            anchor_blocks=view.anchor_blocks,
            model=view.model,
            anchor_payload=view.anchor_payload,
            header_blocks=view.header_blocks,
        )
    if "messages" not in body and not isinstance(body.get("prompt"), str):
        raise Malformed(f"a {path} body the canonical view cannot read")
    text = _render_messages(body) if "messages" in body else body["prompt"]
    salt = str(body.get("cache_salt", "") or "")
    hashes, tokens = text_blocks(text, salt=salt)
    return ReplayRequest(
        t=t,
        tenant=salt,
        block_hashes=hashes,
        block_tokens=tokens,
        output_tokens=out_tokens,
        session_id=None if sid is None else str(sid),
        model=str(body.get("model", "")),
    )


def _core_view(path: str, body: dict, headers: dict):
    try:
        from proxy.core.fingerprint import view_from_openai
    except ImportError:  # the core is optional for loading
        return None
    try:
        return view_from_openai(path, body, headers)
    except Exception:  # noqa: BLE001 - an unreadable body falls back to the text chain
        return None


# ---------------------------------------------------------------------------------------- loading
def detect_format(obj: dict) -> str:
    """Guess a format from one record's keys."""
    if "chat_id" in obj and "hash_ids" in obj:
        return "bailian"
    if "hash_ids" in obj:
        return "mooncake"
    if "input" in obj and ("session_id" in obj or "output" in obj):
        return "lmcache"
    if any(k in obj for k in ("messages", "prompt", "body", "request")):
        return "openai"
    raise Malformed(f"cannot tell the format from keys {sorted(obj)[:6]}")


def _parser_for(fmt: str):
    if fmt == "mooncake":
        return parse_mooncake
    if fmt == "bailian":
        return _bailian_parser()
    if fmt == "lmcache":
        return parse_lmcache
    if fmt == "openai":
        return parse_openai
    raise ValueError(f"unknown trace format {fmt!r}; expected one of {FORMATS}")


def load_lines(lines: Iterable[str], fmt: str = "auto") -> LoadResult:
    """Parse jsonl lines into a time-ordered request stream; count every malformed line."""
    parse = None if fmt == "auto" else _parser_for(fmt)
    result = LoadResult([], fmt, 0)
    out: list[ReplayRequest] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        result.lines += 1
        try:
            obj = json.loads(line)
        except ValueError as exc:
            result.note(lineno, f"not JSON: {exc.msg}")
            continue
        if not isinstance(obj, dict):
            result.note(lineno, "not a JSON object")
            continue
        try:
            if parse is None:
                result.format = detect_format(obj)
                parse = _parser_for(result.format)
            out.append(parse(obj))
        except Malformed as exc:
            result.note(lineno, str(exc))
        except (TypeError, ValueError) as exc:
            result.note(lineno, f"bad value: {exc}")
    out.sort(key=lambda r: r.t)  # stable: equal timestamps keep file order
    result.requests = out
    result.block_size = {"mooncake": MOONCAKE_BLOCK, "bailian": BAILIAN_BLOCK}.get(result.format, TEXT_BLOCK)
    if result.format == "auto":
        result.format = "unknown"
    return result


def load_trace(path: str | Path, fmt: str = "auto", limit: int | None = None) -> LoadResult:
    """Load a jsonl trace file (`limit` keeps only the first N non-empty lines)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        if limit is None:
            return load_lines(fh, fmt)
        lines: list[str] = []
        for line in fh:
            if line.strip():
                lines.append(line)
                if len(lines) >= limit:
                    break
        return load_lines(lines, fmt)


def unique_blocks(requests: Sequence[ReplayRequest]) -> int:
    seen: set[int] = set()
    for r in requests:
        seen.update(r.block_hashes)
    return len(seen)
