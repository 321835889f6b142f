"""Thin HTTP helpers for the e2e checks: streamed requests with client-side TTFT, vLLM's /metrics.

Why not the proxy's own numbers: every check's oracle is what vLLM itself reports — the
`usage.prompt_tokens_details.cached_tokens` of each response and the `vllm:*` counters — so this
module reads those and nothing from the proxy except its `cachescout_*` warmup counter, which is
reported beside vLLM's numbers, never used as evidence.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from dataclasses import dataclass, field

import httpx

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


@dataclass
class Reply:
    status: int
    ttft: float | None  # seconds to the first streamed chunk carrying a choice
    total: float
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    text: str = ""
    tool_calls: list = field(default_factory=list)
    error: str | None = None


def stream_chat(
    client: httpx.Client, base: str, body: dict, headers: dict | None = None, path: str = "/v1/chat/completions"
) -> Reply:
    """POST a streaming request and measure TTFT on the client; usage comes from the last chunk."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    reply = Reply(status=0, ttft=None, total=0.0)
    tool_calls: dict[int, dict] = {}
    with client.stream("POST", base + path, json=body, headers=headers or {}) as resp:
        reply.status = resp.status_code
        if resp.status_code != 200:
            resp.read()
            reply.error = resp.text[:300]
            reply.total = time.perf_counter() - t0
            return reply
        for line in resp.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            for ch in chunk.get("choices") or ():
                if reply.ttft is None:
                    reply.ttft = time.perf_counter() - t0
                delta = ch.get("delta") or {}
                reply.text += delta.get("content") or ch.get("text") or ""
                for tc in delta.get("tool_calls") or ():
                    slot = tool_calls.setdefault(tc.get("index", 0), {"function": {"name": "", "arguments": ""}})
                    fn = tc.get("function") or {}
                    slot["function"]["name"] += fn.get("name") or ""
                    slot["function"]["arguments"] += fn.get("arguments") or ""
                    if tc.get("id"):
                        slot["id"] = tc["id"]
                if ch.get("finish_reason"):
                    reply.finish_reason = ch["finish_reason"]
            usage = chunk.get("usage")
            if usage:
                reply.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                reply.completion_tokens = int(usage.get("completion_tokens") or 0)
                details = usage.get("prompt_tokens_details") or {}
                reply.cached_tokens = int(details.get("cached_tokens") or 0)
    reply.total = time.perf_counter() - t0
    reply.tool_calls = [tool_calls[i] for i in sorted(tool_calls)]
    return reply


def post_json(client: httpx.Client, base: str, path: str, body: dict, headers: dict | None = None) -> dict:
    resp = client.post(base + path, json=body, headers=headers or {})
    if resp.status_code != 200:
        raise RuntimeError(f"POST {path} answered {resp.status_code}: {resp.text[:300]}")
    return resp.json()


def metrics(client: httpx.Client, base: str) -> dict[str, float]:
    """Prometheus text -> {name: value summed over label sets}; histogram _count/_sum kept by name."""
    resp = client.get(base + "/metrics")
    resp.raise_for_status()
    out: dict[str, float] = {}
    for line in resp.text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def debug_state(client: httpx.Client, base: str, token: str | None) -> dict:
    """The proxy's /debug/state (needs its admin token), or {} when it is not reachable: diagnostics
    for a check's report, never what a check is judged on."""
    if not token:
        return {}
    try:
        resp = client.get(base + "/debug/state", headers={"Authorization": f"Bearer {token}"})
        return resp.json() if resp.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return {}


def labelled(client: httpx.Client, base: str, name: str) -> dict[str, float]:
    """One metric's samples by label set, e.g. {'{kind="warm",outcome="ok",reason="tool_resume"}': 2.0}."""
    resp = client.get(base + "/metrics")
    resp.raise_for_status()
    out: dict[str, float] = {}
    for line in resp.text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == name:
            out[m.group(2) or ""] = out.get(m.group(2) or "", 0.0) + float(m.group(3))
    return out


def labelled_delta(
    after: dict[str, float], before: dict[str, float], keys: tuple[str, ...], must: str = ""
) -> dict[str, float]:
    """Increase of a `labelled` metric between two reads, summed by `keys` labels ("warm/hint": 3)."""
    out: dict[str, float] = {}
    for labels, v in after.items():
        d = v - before.get(labels, 0.0)
        if not d or must not in labels:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        k = "/".join(found.get(key, "?") for key in keys)
        out[k] = out.get(k, 0.0) + d
    return out


def delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def reset_prefix_cache(client: httpx.Client, vllm: str) -> None:
    resp = client.post(vllm + "/reset_prefix_cache")
    if resp.status_code != 200:
        raise RuntimeError(f"/reset_prefix_cache answered {resp.status_code} (VLLM_SERVER_DEV_MODE=1 missing?)")


def tokenize(
    client: httpx.Client,
    vllm: str,
    model: str,
    messages: list[dict],
    tools: list | None = None,
    add_generation_prompt: bool = True,
    salt: str | None = None,
) -> list[int]:
    body: dict = {"model": model, "messages": messages, "add_generation_prompt": add_generation_prompt}
    if tools:
        body["tools"] = tools
    return list(post_json(client, vllm, "/tokenize", body)["tokens"])


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def full_blocks(tokens: int, block: int = 32) -> int:
    return (tokens // block) * block


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")
