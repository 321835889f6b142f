"""Claude Code sessions, live over sockets: hash ids -> text, sessions -> chat requests with their timing.

Why: the replay tells what a policy *could* win on the shared Claude Code sessions in virtual time;
this sends the same sessions as real OpenAI chat requests to a real engine (the simulated one, or any
OpenAI-compatible server), straight or through `cachescout serve`, so the proxy's own costs (CPU,
memory, bytes) and its live effect are measured on real agent traffic.

How a trace becomes requests (`proxy.replay.claude_code` reads and composes the files):
- every hash id becomes a deterministic 64-token text block (`block_text`): 64 words of one 6-7
  character piece each, drawn from a hash of the id, so the same id in one namespace gives the same
  text (the composer already makes ids of different users distinct) and the simulated engine's
  tokenizer (`proxy.simengine.tokenizer`: a space-led word of <= 8 characters is one token) reads
  exactly 64 tokens; a real tokenizer reads more or fewer, the prefix structure is what counts;
- a prompt is its session's fixed head (the tools + system prefix, `anchor_blocks`) as the system
  message, then the conversation: each request keeps the messages of the previous one up to the
  blocks they share (a message cut where the prompts diverge), and the new blocks become the
  previous answer (an assistant message, with a tool call when that answer stopped for a tool) and
  the new input (a `tool` message when the trace says `tool_result`, else a user message);
- a session's requests go out in order: each at its trace time (offset + `t`, times `time_scale`)
  but never before the previous answer plus the trace's `think_time` (times `time_scale`);
- each request asks for the trace's answer length (capped, `max_tokens`), with `tool_choice`
  "required" when the trace's answer was a tool call and "none" otherwise, so the proxy sees the
  stop reasons the real agent produced.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import xxhash

from proxy.core.config import PolicyConfig
from proxy.replay.claude_code import BLOCK_SIZE, TOOL_USE, CCRequest, Composition

# one fixed tool, so that tool-call answers and `tool` messages are well formed; its schema is part
# of the fixed head of every prompt (rendered inside the system turn by chat templates)
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "run a tool of the coding agent",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    }
]
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"

# PolicyConfig fields in seconds (multiplied by the time scale) and in per-second rates (divided)
SCALED_SECONDS = (
    "session_ttl_s",
    "continuation_horizon_s",
    "cooldown_s",
    "action_ttl_s",
    "min_lead_s",
    "sweep_interval_s",
    "resume_wake_margin_s",
    "conversion_window_s",
)
SCALED_RATES = ("prefill_tokens_per_s",)


def scaled_policy(time_scale: float) -> dict[str, float]:
    """The proxy's PolicyConfig overrides for a time-scaled run (its defaults x scale / scale)."""
    if time_scale == 1.0:
        return {}
    base = PolicyConfig()
    out = {k: float(getattr(base, k)) * time_scale for k in SCALED_SECONDS}
    out.update({k: float(getattr(base, k)) / time_scale for k in SCALED_RATES})
    return out


def block_text(block_id: int, tokens: int = BLOCK_SIZE) -> str:
    """The text of one hash block: `tokens` space-led words of 7 characters (one sim token each)."""
    out = []
    for j in range(tokens):
        h = xxhash.xxh64_intdigest(f"{block_id}:{j}".encode())
        word = ["k"]
        for _ in range(6):
            h, r = divmod(h, 36)
            word.append(_ALPHABET[r])
        out.append(" " + "".join(word))
    return "".join(out)


class BlockTexts:
    """`block_text` with a bounded memo (a session re-sends its whole context every request)."""

    def __init__(self, limit: int = 200_000) -> None:
        self._memo: dict[int, str] = {}
        self._limit = limit

    def __call__(self, block_id: int) -> str:
        s = self._memo.get(block_id)
        if s is None:
            s = block_text(block_id)
            if len(self._memo) < self._limit:
                self._memo[block_id] = s
        return s

    def join(self, ids: Sequence[int]) -> str:
        return "".join(self(i) for i in ids)


@dataclass(frozen=True, slots=True)
class Segment:
    """One message of a prompt: its role and the hash blocks it holds."""

    role: str  # "system" | "user" | "assistant" | "tool"
    blocks: tuple[int, ...]
    call_id: str = ""  # assistant: the tool call it made ("" = none); tool: the call it answers


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One chat request of a session, ready to send."""

    session_id: str
    index: int  # in its session
    t: float  # trace arrival (s, the composition's clock, unscaled)
    think_s: float  # the trace's think time before it (s, unscaled)
    segments: tuple[Segment, ...]
    max_tokens: int
    tool_call: bool  # the trace's answer was a tool call
    resumed: bool  # the previous answer of the session was a tool call (this sends its result)
    prompt_blocks: int


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def plan_session(
    session_id: str, rows: Sequence[tuple[float, tuple[int, ...], CCRequest, int]], max_tokens_cap: int = 32
) -> list[PlannedRequest]:
    """A session's requests as messages. `rows`: (arrival t, global block ids, source request,
    anchor blocks), in order. Why segments and not text: the text is made once per send, from the
    blocks, so a plan for 64 users of 100k tokens stays small."""
    out: list[PlannedRequest] = []
    prev_ids: tuple[int, ...] = ()
    prev_segs: list[Segment] = []
    prev_src: CCRequest | None = None
    for k, (t, ids, src, anchor) in enumerate(rows):
        head = min(max(anchor, 1), len(ids)) if ids else 0
        p = _common(prev_ids, ids)
        if not prev_segs or p < len(prev_segs[0].blocks):  # first request, or the head changed
            segs = [Segment("system", ids[:head])]
            p = head
        else:
            segs, used = [], 0
            for s in prev_segs:
                if used + len(s.blocks) <= p:
                    segs.append(s)
                    used += len(s.blocks)
                    continue
                if p > used:  # the prompts diverge inside this message: keep its shared part
                    segs.append(Segment(s.role, s.blocks[: p - used], s.call_id))
                break
            if segs and segs[-1].role == "assistant" and segs[-1].call_id:
                segs[-1] = Segment("assistant", segs[-1].blocks)  # a cut tool call: plain text
        new = ids[p:]
        resumed = prev_src is not None and prev_src.stop == TOOL_USE
        if new:
            if prev_src is not None and k > 0:
                n_ans = min(len(new) - 1, max(1, round(prev_src.output_tokens / BLOCK_SIZE)))
                if n_ans > 0:
                    call = f"call_{k - 1}" if resumed else ""
                    segs.append(Segment("assistant", new[:n_ans], call))
                    new = new[n_ans:]
            last = segs[-1] if segs else None
            if resumed and "tool_result" in src.input_types and last is not None and last.call_id:
                segs.append(Segment("tool", new, last.call_id))
            else:
                segs.append(Segment("user", new))
        out.append(
            PlannedRequest(
                session_id=session_id,
                index=k,
                t=t,
                think_s=float(src.think_time or 0.0),
                segments=tuple(segs),
                max_tokens=max(1, min(max_tokens_cap, src.output_tokens or 1)),
                tool_call=src.stop == TOOL_USE,
                resumed=resumed,
                prompt_blocks=len(ids),
            )
        )
        prev_ids, prev_segs, prev_src = ids, segs, src
    return out


def plan(comp: Composition, max_tokens_cap: int = 32) -> dict[str, list[PlannedRequest]]:
    """Every session of a composition (the composer's arrival order kept within each session)."""
    rows: dict[str, list[tuple[float, tuple[int, ...], CCRequest, int]]] = {}
    for rr, src in zip(comp.requests, comp.meta, strict=True):
        sid = rr.session_id or "session"
        rows.setdefault(sid, []).append((rr.t, rr.block_hashes, src, rr.anchor_blocks))
    return {sid: plan_session(sid, r, max_tokens_cap) for sid, r in rows.items()}


def messages(req: PlannedRequest, texts: BlockTexts) -> list[dict[str, Any]]:
    """The OpenAI messages of a planned request."""
    out: list[dict[str, Any]] = []
    for s in req.segments:
        text = texts.join(s.blocks)
        if s.role == "assistant" and s.call_id:
            out.append(
                {
                    "role": "assistant",
                    "content": text,
                    "tool_calls": [
                        {"id": s.call_id, "type": "function", "function": {"name": "run", "arguments": "{}"}}
                    ],
                }
            )
        elif s.role == "tool":
            out.append({"role": "tool", "tool_call_id": s.call_id, "content": text})
        else:
            out.append({"role": s.role, "content": text})
    return out


def body_bytes(req: PlannedRequest, texts: BlockTexts, model: str) -> bytes:
    """The exact bytes sent for a request (streamed, with usage), so they can be compared end to end."""
    body = {
        "model": model,
        "messages": messages(req, texts),
        "tools": TOOLS,
        "tool_choice": "required" if req.tool_call else "none",
        "max_tokens": req.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
        "user": req.session_id,
    }
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass(slots=True)
class LiveRecord:
    session_id: str
    index: int
    prompt_tokens: int
    cached_tokens: int
    ttft_s: float | None
    latency_s: float
    resumed: bool
    finish_reason: str | None
    sent_at: float
    body_sha256: str


@dataclass(slots=True)
class LiveResult:
    records: list[LiveRecord] = field(default_factory=list)
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    sent_digests: list[str] = field(default_factory=list)


async def _send(client: httpx.AsyncClient, url: str, data: bytes) -> tuple[dict[str, Any], float | None, float]:
    t0 = time.perf_counter()
    ttft: float | None = None
    usage: dict[str, Any] = {}
    finish: str | None = None
    headers = {"content-type": "application/json"}
    async with client.stream("POST", url, content=data, headers=headers) as resp:
        if resp.status_code != 200:
            await resp.aread()
            raise RuntimeError(f"HTTP {resp.status_code}")
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            obj = json.loads(payload)
            if obj.get("usage"):
                usage = obj["usage"]
            for ch in obj.get("choices") or ():
                delta = ch.get("delta") or {}
                if ttft is None and (delta.get("content") or delta.get("tool_calls")):
                    ttft = time.perf_counter() - t0
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
    return {"usage": usage, "finish_reason": finish}, ttft, time.perf_counter() - t0


async def run_live(
    base_url: str,
    sessions: dict[str, list[PlannedRequest]],
    *,
    model: str,
    time_scale: float = 1.0,
    tick: Callable[[], None] = lambda: None,
    timeout_s: float = 600.0,
) -> LiveResult:
    """Send every session's requests with their timing; one task per session, all at once."""
    url = base_url.rstrip("/") + "/v1/chat/completions"
    out = LiveResult()
    texts = BlockTexts()
    limits = httpx.Limits(max_connections=len(sessions) + 8, max_keepalive_connections=len(sessions) + 8)
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), limits=limits) as client:

        async def one(reqs: list[PlannedRequest]) -> None:
            ready = 0.0  # earliest send (s since t0): the previous answer plus the think time
            for r in reqs:
                at = max(r.t * time_scale, ready)
                delay = at - (time.perf_counter() - t0)
                if delay > 0:
                    await asyncio.sleep(delay)
                data = body_bytes(r, texts, model)
                digest = hashlib.sha256(data).hexdigest()
                out.sent_digests.append(digest)
                sent = time.perf_counter() - t0
                try:
                    summary, ttft, latency = await _send(client, url, data)
                except (httpx.HTTPError, RuntimeError, ValueError) as exc:
                    out.errors += 1
                    kind = type(exc).__name__ if not isinstance(exc, RuntimeError) else str(exc)[:40]
                    out.error_kinds[kind] = out.error_kinds.get(kind, 0) + 1
                    tick()
                    return  # the session's context is lost; its later requests would not be real
                usage = summary["usage"] or {}
                details = usage.get("prompt_tokens_details") or {}
                out.records.append(
                    LiveRecord(
                        r.session_id,
                        r.index,
                        int(usage.get("prompt_tokens") or 0),
                        int(details.get("cached_tokens") or 0),
                        ttft,
                        latency,
                        r.resumed,
                        summary["finish_reason"],
                        sent,
                        digest,
                    )
                )
                tick()
                nxt = reqs[r.index + 1] if r.index + 1 < len(reqs) else None
                think = nxt.think_s if nxt is not None else 0.0
                ready = time.perf_counter() - t0 + think * time_scale

        await asyncio.gather(*(one(reqs) for reqs in sessions.values()))
    out.wall_s = time.perf_counter() - t0
    return out


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    vs = sorted(values)
    return vs[min(len(vs) - 1, max(0, round(q * (len(vs) - 1))))]


def summary(res: LiveResult) -> dict[str, Any]:
    """Hit rate (the engine's `cached_tokens` over `prompt_tokens`), TTFT, resume TTFT, errors."""
    recs = res.records
    prompt = sum(r.prompt_tokens for r in recs)
    cached = sum(r.cached_tokens for r in recs)
    ttfts = [r.ttft_s for r in recs if r.ttft_s is not None]
    resume = [r.ttft_s for r in recs if r.ttft_s is not None and r.resumed]
    return {
        "requests": len(recs),
        "errors": res.errors,
        "error_kinds": dict(res.error_kinds),
        "tool_resumes": sum(r.resumed for r in recs),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "hit_rate": cached / prompt if prompt else 0.0,
        "ttft_mean_s": statistics.fmean(ttfts) if ttfts else float("nan"),
        "ttft_p50_s": _pct(ttfts, 0.5),
        "ttft_p99_s": _pct(ttfts, 0.99),
        "ttft_resume_mean_s": statistics.fmean(resume) if resume else float("nan"),
        "wall_s": res.wall_s,
    }
