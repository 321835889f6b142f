"""Canonical request view: OpenAI request -> chained xxh3_64 block hashes.

Why segments: every part of the prompt (the envelope header, then each message) is serialised as
canonical JSON and cut into fixed-size char blocks *per segment*, each block's xxh3_64 seeded
with the previous block's hash (the chain). Appending a message therefore
leaves every earlier block unchanged, so a follow-up turn's chain extends its parent's chain
exactly, which is what session inference and anchor identity rely on. The first block's parent is
a hash of the tenant (cache_salt), so tenants never share a chain. Anything unparseable returns
None: the request is still forwarded, the policy just skips it.

A message segment is ``"M" + canonical JSON of everything but the content + "\x1e" + content +
"\x1f"``
(string content as is, other content as canonical JSON), so block k of a message covers a known
character range of its content: an anchor that ends inside a message (instructions and variable
content in one first user message) is rebuilt as the messages before it plus that message's
content cut at the anchor's last block, rendered with ``continue_final_message`` (no end-of-turn
tokens; the adapter also drops the last tokens, whose BPE merge may differ from the full prompt's).

`/v1/responses` and `/v1/messages` bodies are converted to the chat messages vLLM renders them as
(``api_shapes``) and hashed by the same rules, so one agent has one chain on all three APIs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import xxhash

from .api_shapes import ShapeError, messages_to_chat, responses_to_chat
from .session_ids import _get_header, _session_id
from .view import RequestView

WARMUP_HEADER = "x-cachescout-warmup"
_TEMPLATE_FIELDS = ("chat_template", "chat_template_kwargs")  # change the rendered prompt
_ANCHOR_ROLES = ("system", "developer")
_SEP = "\x1e"  # meta | content inside a message segment
_END = "\x1f"  # closes a message segment (like end-of-turn)
_IDS_PER_BLOCK = 16  # token-id prompts: exact tokens


def tenant_root(tenant: str) -> int:
    """Parent hash of a tenant's first block (the salt)."""
    return xxhash.xxh3_64_intdigest(b"cachescout/v1|" + tenant.encode("utf-8", "surrogatepass"))


def chain_text(
    parent: int, text: str, block_chars: int, chars_per_token: float, hashes: list[int], tokens: list[int]
) -> int:
    """Append the blocks of one segment to (hashes, tokens); returns the new parent hash.
    Chained by seeding: h_i = xxh3_64(block_i, seed=h_{i-1})."""
    if not text:
        return parent
    h64 = xxhash.xxh3_64_intdigest
    add_h = hashes.append
    n = len(text)
    full = n - n % block_chars
    for start in range(0, full, block_chars):
        parent = h64(text[start : start + block_chars].encode("utf-8", "surrogatepass"), parent)
        add_h(parent)
    nfull = full // block_chars
    if nfull:
        tokens.extend([max(1, math.ceil(block_chars / chars_per_token))] * nfull)
    if full < n:
        parent = h64(text[full:].encode("utf-8", "surrogatepass"), parent)
        add_h(parent)
        tokens.append(max(1, math.ceil((n - full) / chars_per_token)))
    return parent


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _canon_content(content: Any) -> Any:
    """String, None, or a list of parts; raises ValueError on any other shape."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append({"type": "text", "text": part})
            elif isinstance(part, Mapping):
                parts.append(dict(part))
            else:
                raise ValueError("bad content part")
        return parts
    raise ValueError("bad content")


def _canon_message(msg: Any) -> dict[str, Any]:
    if not isinstance(msg, Mapping):
        raise ValueError("message is not an object")
    role = msg.get("role")
    if not isinstance(role, str):
        raise ValueError("message without role")
    out: dict[str, Any] = {"role": role, "content": _canon_content(msg.get("content"))}
    for key in ("name", "tool_calls", "tool_call_id", "function_call"):
        if msg.get(key) is not None:
            out[key] = msg[key]
    return out


def _segment(cm: dict[str, Any]) -> tuple[str, int, bool]:
    """(segment text, chars before the content, content is a plain string: cuttable)."""
    content = cm.pop("content")
    head = "M" + _canon(cm) + _SEP
    if isinstance(content, str):  # the end mark: a message that grows is a new last block
        return head + content + _END, len(head), True
    return head + _canon(content) + _END, len(head), False


def _int_or_none(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return int(v)


def _history_keys(tenant: str, msgs: list[dict[str, Any]], start: int) -> tuple[int, ...]:
    """Chained content hashes of the conversation messages in ``msgs[start:]``: role and name left
    out (a group chat shows one agent's turn to the others as a user message), tool exchanges left
    out (an agent's tool calls and their results stay in its own rounds; the others see its answer)."""
    h = tenant_root(tenant) ^ 0x5A5A5A5A5A5A5A5A
    h64 = xxhash.xxh3_64_intdigest
    out = []
    for cm in msgs[start:]:
        if cm["role"] == "tool" or "tool_calls" in cm or "function_call" in cm or "tool_call_id" in cm:
            continue
        c = cm.get("content")
        data = c if isinstance(c, str) else _canon(c)
        h = h64(data.encode("utf-8", "surrogatepass"), h)
        out.append(h)
    return tuple(out)


def view_from_openai(
    path: str,
    body: object,
    headers: Mapping[str, str] | None = None,
    *,
    block_chars: int = 64,
    chars_per_token: float = 4.0,
) -> RequestView | None:
    """Build the canonical view of a /v1/chat/completions or /v1/completions request, or None."""
    try:
        if isinstance(body, (bytes, bytearray, str)):
            body = json.loads(body)
        if not isinstance(body, Mapping) or not isinstance(path, str):
            return None
        p = path.split("?", 1)[0].rstrip("/")
        if p.endswith("/chat/completions"):
            return _chat_view(body, headers, block_chars, chars_per_token)
        if p.endswith("/responses"):
            chat, hidden = responses_to_chat(body)
            return _chat_view(body, headers, block_chars, chars_per_token, chat, hidden)
        if p.endswith("/messages"):
            return _chat_view(body, headers, block_chars, chars_per_token, messages_to_chat(body))
        if p.endswith("/completions"):
            return _completion_view(body, headers, block_chars, chars_per_token)
        return None
    except (ShapeError, ValueError, TypeError, RecursionError, OverflowError, UnicodeError):
        return None


def _choices(body: Mapping[str, Any]) -> int:
    """OpenAI ``n`` (completions also ``best_of``): sequences forked from one prompt."""
    n = _int_or_none(body.get("n"))
    b = _int_or_none(body.get("best_of"))
    return max(1, n or 1, b or 1)


def _common(
    body: Mapping[str, Any], headers: Mapping[str, str] | None
) -> tuple[str, str, int | None, bool, str | None]:
    model = body.get("model")
    model = model if isinstance(model, str) else ""
    salt = body.get("cache_salt")
    tenant = salt if isinstance(salt, str) else ""
    max_tokens = _int_or_none(body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = _int_or_none(body.get("max_completion_tokens"))
    if max_tokens is None:
        max_tokens = _int_or_none(body.get("max_output_tokens"))  # Responses API
    warm_hdr = _get_header(headers, WARMUP_HEADER)
    is_warmup = bool(warm_hdr) and str(warm_hdr).lower() not in ("0", "false", "no")
    if max_tokens is not None and max_tokens <= 1:
        is_warmup = True
    return tenant, model, max_tokens, is_warmup, _session_id(body, headers)


def _chat_view(
    body: Mapping[str, Any],
    headers: Mapping[str, str] | None,
    block_chars: int,
    cpt: float,
    chat: Mapping[str, Any] | None = None,
    hidden_history: bool = False,
) -> RequestView | None:
    """``chat``: the chat form of a Responses/Messages body (``body`` still gives the envelope)."""
    src = body if chat is None else chat
    messages = src.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    tenant, model, max_tokens, is_warmup, sid = _common(body, headers)
    canon_msgs = [_canon_message(m) for m in messages]
    n_sys = 0
    while n_sys < len(canon_msgs) and canon_msgs[n_sys]["role"] in _ANCHOR_ROLES:
        n_sys += 1
    history = _history_keys(tenant, canon_msgs, n_sys)  # before _segment pops the content
    tools = src.get("tools")
    if tools is not None and not isinstance(tools, list):
        return None
    header = {"model": model, "tools": tools, "functions": src.get("functions")}
    extra: dict[str, Any] = {}
    for f in _TEMPLATE_FIELDS:
        if body.get(f) is not None:
            header[f] = body[f]
            extra[f] = body[f]
    hashes: list[int] = []
    tokens: list[int] = []
    parent = chain_text(tenant_root(tenant), "H" + _canon(header), block_chars, cpt, hashes, tokens)
    header_blocks = len(hashes)
    anchor_msgs = n_sys  # the marked anchor: the system/developer messages (none: 0)
    anchor_blocks = 0
    segs: list[tuple[int, int, bool]] = []
    for i, cm in enumerate(canon_msgs):
        text, head, cuttable = _segment(cm)
        segs.append((len(hashes), head, cuttable))
        parent = chain_text(parent, text, block_chars, cpt, hashes, tokens)
        if i + 1 == anchor_msgs:
            anchor_blocks = len(hashes)
    base = {"kind": "chat", "model": model, "tools": tools, "cache_salt": salt_or_none(tenant), **extra}
    return RequestView(
        tenant=tenant,
        model=model,
        block_hashes=tuple(hashes),
        block_tokens=tuple(tokens),
        anchor_blocks=anchor_blocks,
        session_id=sid,
        max_tokens=max_tokens,
        is_warmup=is_warmup,
        n=_choices(body),
        anchor_payload={
            **base,
            "messages": list(messages),
            "segs": tuple(segs),
            "block_chars": block_chars,
            "header_blocks": header_blocks,
            "total_blocks": len(hashes),
        },
        context_payload=None if hidden_history else {**base, "messages": list(messages)},
        header_blocks=header_blocks,
        history_keys=history,
    )


def salt_or_none(tenant: str) -> str | None:
    return tenant or None


def _completion_view(
    body: Mapping[str, Any], headers: Mapping[str, str] | None, block_chars: int, cpt: float
) -> RequestView | None:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    tenant, model, max_tokens, is_warmup, sid = _common(body, headers)
    hashes: list[int] = []
    tokens: list[int] = []
    parent = chain_text(tenant_root(tenant), "H" + _canon({"model": model}), block_chars, cpt, hashes, tokens)
    header_blocks = len(hashes)
    if isinstance(prompt, str):
        if not prompt:
            return None
        chain_text(parent, prompt, block_chars, cpt, hashes, tokens)
        unit = block_chars
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        for start in range(0, len(prompt), _IDS_PER_BLOCK):
            ids = prompt[start : start + _IDS_PER_BLOCK]
            data = b"".join(int(t).to_bytes(8, "little", signed=True) for t in ids)
            parent = xxhash.xxh3_64_intdigest(data, parent)
            hashes.append(parent)
            tokens.append(len(ids))
        unit = _IDS_PER_BLOCK
    else:
        return None  # batches and odd shapes: no view
    payload = {
        "kind": "completion",
        "model": model,
        "prompt": prompt,
        "header_blocks": header_blocks,
        "block_unit": unit,
    }
    return RequestView(
        tenant=tenant,
        model=model,
        block_hashes=tuple(hashes),
        block_tokens=tuple(tokens),
        anchor_blocks=0,
        session_id=sid,
        max_tokens=max_tokens,
        is_warmup=is_warmup,
        n=_choices(body),
        anchor_payload=payload,
        context_payload=payload,
    )


def truncate_payload(payload: object, n_blocks: int) -> object:
    """The payload that rebuilds exactly the first n_blocks of a view (None: nothing replayable).

    Completion views: the prompt cut at the block. Chat views: the messages up to the block; an
    anchor ending inside a message keeps that message's content up to the block and asks for
    ``continue_final_message`` (a message whose content is not a plain string is only ever cut at
    its start). Other payloads pass through."""
    if not isinstance(payload, Mapping):
        return payload
    kind = payload.get("kind")
    if kind == "completion":
        body_blocks = max(0, n_blocks - int(payload.get("header_blocks", 0)))
        unit = int(payload.get("block_unit", 64))
        prompt = payload.get("prompt") or ""
        return {"kind": "completion", "model": payload.get("model", ""), "prompt": prompt[: body_blocks * unit]}
    segs = payload.get("segs")
    if kind != "chat" or segs is None:
        return payload
    msgs = payload["messages"]
    out = {
        k: v
        for k, v in payload.items()
        if k not in ("segs", "block_chars", "header_blocks", "total_blocks", "messages")
    }
    m = len(segs) - 1
    while m >= 0 and segs[m][0] >= n_blocks:
        m -= 1
    if m < 0:
        return None  # the header (model + tools) only
    start, head, cuttable = segs[m]
    end = segs[m + 1][0] if m + 1 < len(segs) else int(payload["total_blocks"])
    if n_blocks >= end:
        out["messages"] = list(msgs[: m + 1])
        return out
    chars = (n_blocks - start) * int(payload["block_chars"]) - head
    content = msgs[m].get("content") if isinstance(msgs[m], Mapping) else None
    if cuttable and chars > 0 and isinstance(content, str):
        out["messages"] = [*msgs[:m], {**msgs[m], "content": content[:chars]}]
        out["continue_final_message"] = True
        return out
    if m == 0:
        return None
    out["messages"] = list(msgs[:m])
    return out
