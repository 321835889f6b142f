"""Check 1: through the proxy, the `openai` SDK gets exactly what it gets from vLLM directly.

Why token ids and not text: text equality can hide a re-tokenisation or a dropped field; vLLM's
`return_token_ids` gives the prompt and output ids, so equal ids + equal usage (including
`cached_tokens`) mean the proxy forwarded the request and the response byte-for-byte in effect.
Each case runs twice per side after a prefix-cache reset (cold, then warm), so both a zero and a
non-zero `cached_tokens` must come through unchanged. Greedy decoding of a single request is
deterministic on this engine.
"""

from __future__ import annotations

from typing import Any

from openai import OpenAI
from vclient import reset_prefix_cache
from workload import text

EXTRA = {"return_token_ids": True}


def _usage(u: Any) -> dict:
    if u is None:
        return {}
    d = u.model_dump() if hasattr(u, "model_dump") else dict(u)
    details = d.get("prompt_tokens_details") or {}
    return {
        "prompt_tokens": d.get("prompt_tokens"),
        "completion_tokens": d.get("completion_tokens"),
        "total_tokens": d.get("total_tokens"),
        "cached_tokens": details.get("cached_tokens"),
    }


def _extra(obj: Any, name: str) -> Any:
    extra = getattr(obj, "model_extra", None) or {}
    return extra.get(name, getattr(obj, name, None))


def _chat(client: OpenAI, model: str, messages: list[dict], stream: bool) -> dict:
    if not stream:
        r = client.chat.completions.create(
            model=model, messages=messages, max_tokens=12, temperature=0, extra_body=EXTRA
        )
        ch = r.choices[0]
        return {
            "text": ch.message.content,
            "finish": ch.finish_reason,
            "ids": _extra(ch, "token_ids"),
            "prompt_ids": _extra(r, "prompt_token_ids"),
            "usage": _usage(r.usage),
        }
    out: dict = {"text": "", "finish": None, "ids": [], "prompt_ids": None, "usage": {}}
    for chunk in client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=EXTRA,
    ):
        out["prompt_ids"] = out["prompt_ids"] or _extra(chunk, "prompt_token_ids")
        for ch in chunk.choices:
            out["text"] += ch.delta.content or ""
            out["ids"] += _extra(ch, "token_ids") or []
            out["finish"] = ch.finish_reason or out["finish"]
        if chunk.usage:
            out["usage"] = _usage(chunk.usage)
    return out


def _completion(client: OpenAI, model: str, prompt: str, stream: bool) -> dict:
    if not stream:
        r = client.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0, extra_body=EXTRA)
        ch = r.choices[0]
        return {
            "text": ch.text,
            "finish": ch.finish_reason,
            "ids": _extra(ch, "token_ids"),
            "prompt_ids": _extra(ch, "prompt_token_ids"),
            "usage": _usage(r.usage),
        }
    out: dict = {"text": "", "finish": None, "ids": [], "prompt_ids": None, "usage": {}}
    for chunk in client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=EXTRA,
    ):
        for ch in chunk.choices:
            out["text"] += ch.text or ""
            out["ids"] += _extra(ch, "token_ids") or []
            out["prompt_ids"] = out["prompt_ids"] or _extra(ch, "prompt_token_ids")
            out["finish"] = ch.finish_reason or out["finish"]
        if chunk.usage:
            out["usage"] = _usage(chunk.usage)
    return out


def check_passthrough(ctx) -> tuple[bool, str]:
    direct = OpenAI(base_url=ctx.vllm + "/v1", api_key="e2e", max_retries=0, timeout=120)
    proxied = OpenAI(base_url=ctx.proxy + "/v1", api_key="e2e", max_retries=0, timeout=120)
    messages = [
        {"role": "system", "content": "Pass-through probe. " + text("c1:sys", 260)},
        {"role": "user", "content": text("c1:user", 40)},
    ]
    prompt = "Pass-through completion probe. " + text("c1:prompt", 300)
    cases = [
        ("chat", False, lambda c: _chat(c, ctx.model, messages, False)),
        ("chat", True, lambda c: _chat(c, ctx.model, messages, True)),
        ("completions", False, lambda c: _completion(c, ctx.model, prompt, False)),
        ("completions", True, lambda c: _completion(c, ctx.model, prompt, True)),
    ]
    problems: list[str] = []
    seen_cached = 0
    for route, stream, call in cases:
        label = f"{route}{' stream' if stream else ''}"
        sides = {}
        for side, client in (("direct", direct), ("proxy", proxied)):
            reset_prefix_cache(ctx.client, ctx.vllm)
            sides[side] = [call(client), call(client)]  # cold, then warm (cached_tokens > 0)
        for i, (d, p) in enumerate(zip(sides["direct"], sides["proxy"])):
            if not d["ids"] or not d["prompt_ids"]:
                problems.append(f"{label}: vLLM returned no token ids (return_token_ids unsupported?)")
            for key in ("ids", "prompt_ids", "usage", "text", "finish"):
                if d[key] != p[key]:
                    problems.append(f"{label} #{i}: {key} differs: direct={str(d[key])[:80]} proxy={str(p[key])[:80]}")
            if d["usage"].get("cached_tokens") is None:
                problems.append(f"{label} #{i}: no cached_tokens in usage")
            seen_cached = max(seen_cached, int(p["usage"].get("cached_tokens") or 0))
        ctx.log(
            f"   {label}: {len(sides['direct'][0]['prompt_ids'] or [])} prompt ids, "
            f"usage warm {sides['proxy'][1]['usage']}"
        )
    if seen_cached == 0:
        problems.append("no warm request reported cached_tokens > 0: the comparison never covered a cache hit")
    if problems:
        return False, "; ".join(problems[:6])
    return True, (
        f"{len(cases)} cases x (cold, warm): identical prompt/output token ids, text, finish_reason "
        f"and usage incl. cached_tokens (max {seen_cached})"
    )
