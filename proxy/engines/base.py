"""Engine adapter protocol: how the proxy acts on an engine's prefix cache from the side.

The policy core decides *what* to keep warm (an `Action`); an adapter knows *how* a given engine
can be made to keep it: an exact-token `max_tokens=1` request, a retention priority, a metrics
endpoint to read the engine's own hit counters. Every lever is a named capability so the operator
sees at start-up (and at `/debug/engine`) what this engine actually lets the proxy do, and so one
failing lever can be switched off with a logged reason while the proxy keeps forwarding traffic.

Warmups always use the proxy's own engine credential (never a client's Authorization header), the
same `cache_salt` as the traffic they predict, `max_tokens: 1`, and the `X-CacheScout-Warmup: 1`
header so that nobody (including this proxy, if chained) learns from them.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import httpx

from proxy.core import WARMUP_HEADER
from proxy.core.actions import Action
from proxy.engines.routing import ROUTING_HEADERS, routing_of

log = logging.getLogger("cachescout.engines")

TEMPLATE_FIELDS = ("chat_template", "chat_template_kwargs")

# Capability names (shown at /debug/engine and in the start-up log).
CAP_WARM_TOKENS = "warm_tokens"  # exact-token warmup: /tokenize then /v1/completions(prompt=ids)
CAP_WARM_CHAT = "warm_chat"  # warmup through /v1/chat/completions (template applied by engine)
CAP_PRIORITY = "retention_priority"  # engine orders eviction by request priority (SGLang priority, sim)
CAP_METRICS = "metrics"  # /metrics with prefix-cache counters
CAP_RESET = "reset_prefix_cache"  # engine exposes a cache reset (dev mode)
CAP_KV_EVENTS = "kv_events"  # exact residency stream (vLLM ZMQ KV events)
CAP_KV_HINTS = "kv_hints"  # request field accepted (vLLM kv_hints envelope)
CAP_LMCACHE = "lmcache"  # LMCache controller lookup/pin on the offload tier
CAP_SESSION_CACHE = "session_cache"  # SGLang --enable-session-radix-cache: body session_id + /close_session
CAP_SCHED_PRIORITY = "priority_scheduling"  # engine schedules by request priority: the slack lane
# engine reads a request's priority from the `X-Vllm-Priority` header (vLLM 0.32; overrides the body's
# field): the lanes set priority there and forward the client's body bytes untouched
CAP_PRIORITY_HEADER = "priority_header"
PRIORITY_HEADER = "x-vllm-priority"

# Slack lane: the priority every action carries when the engine schedules by priority. vLLM: lower
# runs first (`vllm/v1/core/sched/request_queue.py` PriorityRequestQueue, heap on (priority,
# arrival)); SGLang: higher runs first unless --schedule-low-priority-values-first
# (`srt/managers/schedule_policy.py`: priority_sign = 1 if low-first else -1). The magnitude is far
# past any session-lane value (seconds of virtual time) and inside int64 (vLLM's field bound).
LANE_LOWEST = 1 << 30


def lane_engine_priority(rank: int, sign: int) -> int:
    """A session-lane rank (0 = most urgent) in an engine's sign convention (`sign` +1: lower runs
    first, vLLM), kept strictly ahead of the slack lane's `sign * LANE_LOWEST`. The replay's session
    lane calls this too (proxy/replay/lanes.py)."""
    return sign * max(0, min(int(rank), LANE_LOWEST - 1))


PRIORITY_MODES = ("auto", "on", "off")


@dataclass(frozen=True, slots=True)
class WarmResult:
    """What one warmup/touch request cost and found."""

    ok: bool
    prompt_tokens: int = 0  # tokens the engine saw
    cached_tokens: int = 0  # of which already cached (a pure touch has cached ≈ prompt)
    error: str | None = None
    unsupported: bool = False  # no capability could carry this action
    sent_at: float | None = None  # when the executor sent it (its clock); set there, not by adapters

    @property
    def computed_tokens(self) -> int:
        """Tokens the engine actually prefilled for us: the warmup's compute cost."""
        return max(0, self.prompt_tokens - self.cached_tokens)


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """One scrape of the engine's /metrics, normalised across engines. None = not reported."""

    prefix_queries: float | None = None  # cumulative prompt tokens looked up in the prefix cache
    prefix_hits: float | None = None  # cumulative of those that hit
    hit_rate: float | None = None  # engines that only report a ratio (SGLang)
    kv_usage: float | None = None  # 0..1
    running: float | None = None
    waiting: float | None = None
    capacity_tokens: int | None = None  # prefix-cache size (vLLM cache_config_info blocks × block size)
    capacity_blocks: int | None = None  # vLLM cache_config_info num_gpu_blocks
    block_size: int | None = None  # tokens per KV block (vLLM block_size, SGLang page_size)
    prompt_tokens: float | None = None  # cumulative prompt tokens of admitted requests
    prefill_seconds: float | None = None  # cumulative prefill time (vLLM request_prefill_time_seconds_sum)
    # host-memory tier (vLLM CPU offloading / LMCache connector); None = the engine reports none
    external_hits: float | None = None  # cumulative tokens loaded from it (external_prefix_cache_hits)
    offload_load_bytes: float | None = None  # cumulative CPU->GPU bytes (kv_offload_total_bytes)
    offload_load_seconds: float | None = None  # cumulative CPU->GPU transfer time (kv_offload_total_time)
    host_tier_gib: float | None = None  # its size (cache_config_info kv_offloading_size, GiB)
    raw: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class EngineAdapter(Protocol):
    name: str
    role_chunk_is_first_output: bool

    @property
    def capabilities(self) -> frozenset[str]: ...

    async def probe(self) -> None: ...
    async def warm(self, action: Action) -> WarmResult: ...
    async def scrape(self) -> EngineSnapshot | None: ...
    async def reset_prefix_cache(self) -> bool: ...
    def request_extras(self, survival: float | None) -> dict[str, Any]: ...
    def info(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class WarmSpec:
    """Everything an adapter needs to rebuild a prefix: decoded from an Action's payload."""

    model: str
    messages: tuple[dict, ...] = ()
    tools: tuple[dict, ...] | None = None
    prompt: str | None = None  # /v1/completions traffic: the text prompt prefix
    token_ids: tuple[int, ...] | None = None
    cache_salt: str | None = None
    key: str = ""  # token-id cache key (tenant + last block hash)
    template: dict = field(default_factory=dict)  # chat_template / chat_template_kwargs of the traffic
    continue_final: bool = False  # the anchor ends inside its last message: render it open
    routing: tuple[str, str] | None = None  # (header or body field, value) the session's requests route by


def warm_spec(action: Action) -> WarmSpec | None:
    """Decode an Action's payload (`proxy.core.action_payload.ActionPayload`) into a WarmSpec.

    The payload's request is the proxy's own anchor or context mapping: {"model", "messages",
    "tools", "prompt", "token_ids", "cache_salt", chat template fields}; a tool-resume payload adds
    the assistant tool-call turn, appended to the messages. Returns None when the payload carries
    nothing an engine could replay.
    """
    payload = action.payload
    request = payload.request()
    if request is None:
        return None
    assistant = payload.assistant if isinstance(payload.assistant, dict) else None
    raw_messages = request.get("messages")
    messages = [m for m in raw_messages if isinstance(m, dict)] if isinstance(raw_messages, list | tuple) else []
    if messages and assistant is not None:
        messages.append(assistant)
    prompt = request.get("prompt")
    token_ids = _ints(request.get("token_ids"))
    if isinstance(prompt, list):  # /v1/completions traffic with token-id prompts
        token_ids, prompt = _ints(prompt), None
    text = prompt if isinstance(prompt, str) else None
    if not messages and text is None and not token_ids:
        return None
    tenant = action.tenant
    hashes = action.block_hashes
    key_tail = f"{hashes[-1]:x}" if hashes else action.anchor_id
    tools = request.get("tools")
    salt = request.get("cache_salt")
    return WarmSpec(
        model=str(request.get("model") or ""),
        messages=tuple(messages),
        tools=tuple(t for t in tools if isinstance(t, dict)) if isinstance(tools, list | tuple) and tools else None,
        prompt=text,
        token_ids=token_ids,
        cache_salt=(salt if isinstance(salt, str) and salt else None) or (tenant or None),
        key=f"{tenant}|{len(hashes)}|{key_tail}",
        template={k: request[k] for k in TEMPLATE_FIELDS if request.get(k) is not None},
        continue_final=bool(request.get("continue_final_message")) and assistant is None,
        routing=routing_of(payload.prompt),
    )


def _ints(value: object) -> tuple[int, ...] | None:
    """Token ids: a non-empty list of ints, else None."""
    if isinstance(value, list | tuple) and value and all(isinstance(t, int) for t in value):
        return tuple(value)
    return None


class TokenCache:
    """Bounded LRU of anchor token ids: tokenize each anchor once, not once per warmup."""

    def __init__(self, max_entries: int = 2048) -> None:
        self._d: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._max = max_entries

    def get(self, key: str) -> tuple[int, ...] | None:
        ids = self._d.get(key)
        if ids is not None:
            self._d.move_to_end(key)
        return ids

    def put(self, key: str, ids: tuple[int, ...]) -> None:
        self._d[key] = ids
        self._d.move_to_end(key)
        while len(self._d) > self._max:
            self._d.popitem(last=False)

    def __len__(self) -> int:
        return len(self._d)


class HttpEngineAdapter:
    """Shared plumbing: base URL, the proxy's own credential, capability bookkeeping."""

    name = "base"
    # Whether a streamed chat answer's role-only first chunk (`delta: {"role": "assistant"}`) leaves
    # the engine with its first output, i.e. once prefill is done and the first token is sampled.
    # vLLM and SGLang send it on the first iteration over the engine's outputs (the adapters below
    # say so); an unknown server may send it at once, so by default only a token times prefill.
    role_chunk_is_first_output = False

    def __init__(
        self, client: httpx.AsyncClient, base_url: str, api_key: str | None = None, *, timeout_s: float = 30.0
    ) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.timeout_s = timeout_s
        self._caps: set[str] = set()
        self.disabled: dict[str, str] = {}  # capability -> reason it was switched off
        self.tokens = TokenCache()
        self.counters: dict[str, int] = {"warm_requests": 0, "tokenize_requests": 0, "errors": 0}
        # slack lane (CAP_SCHED_PRIORITY): the engine's scheduling policy as probed, and the sign of
        # its priority field (+1: lower runs first, vLLM; -1: higher runs first, SGLang's default)
        self.priority_mode = "auto"  # operator: auto (probe) | on | off (settings.engine_priority_scheduling)
        self.scheduling: dict[str, str] = {"policy": "unknown", "source": "not probed"}
        self.priority_sign = 1
        self.priority_header_mode = "auto"  # operator: auto (probe) | on | off (settings.engine_priority_header)

    # -- capabilities -------------------------------------------------------------------------
    @property
    def capabilities(self) -> frozenset[str]:
        return frozenset(self._caps)

    def enable(self, cap: str) -> None:
        if cap not in self.disabled:
            self._caps.add(cap)

    def disable(self, cap: str, reason: str) -> None:
        if cap in self._caps or cap not in self.disabled:
            log.warning("engine %s: capability %s disabled: %s", self.name, cap, reason)
        self._caps.discard(cap)
        self.disabled[cap] = reason

    def info(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "base_url": self.base_url,
            "capabilities": sorted(self._caps),
            "disabled": dict(self.disabled),
            "token_cache_entries": len(self.tokens),
            "counters": dict(self.counters),
            "scheduling": {**self.scheduling, "lane_priority": self.lane_priority()},
        }

    def request_extras(self, survival: float | None) -> dict[str, Any]:
        """Fields to add to forwarded client requests (opt-in); none by default."""
        return {}

    # -- slack lane -------------------------------------------------------------------------------
    @property
    def priority_lane(self) -> bool:
        """Actions go at the engine's lowest priority (the engine schedules by priority)."""
        return CAP_SCHED_PRIORITY in self._caps

    @property
    def priority_by_header(self) -> bool:
        """The lanes' priorities go in the `X-Vllm-Priority` header, not the body (CAP_PRIORITY_HEADER)."""
        return CAP_PRIORITY_HEADER in self._caps

    def set_priority_header(self, supported: bool, source: str) -> None:
        """Record the probe's answer (`engine_priority_header`: auto follows it, on/off override)."""
        mode = self.priority_header_mode
        self.scheduling["priority_header"] = f"{mode}: {source}"
        if mode == "on" or (mode == "auto" and supported):
            self.disabled.pop(CAP_PRIORITY_HEADER, None)
            self.enable(CAP_PRIORITY_HEADER)
        else:
            self.disable(CAP_PRIORITY_HEADER, "engine_priority_header=off" if mode == "off" else source)

    def lane_priority(self) -> int | None:
        """The priority every warmup and touch carries in the slack lane; None without it."""
        return self.priority_sign * LANE_LOWEST if self.priority_lane else None

    def engine_priority(self, rank: int) -> int:
        """A session-lane rank (0 = most urgent, larger runs later) in the engine's convention,
        kept strictly ahead of the slack lane."""
        return lane_engine_priority(rank, self.priority_sign)

    def set_scheduling(self, policy: str, source: str) -> None:
        """Record the probed policy and switch the lane: on for "priority" unless the operator said
        off; the operator's "on" without evidence against it (a refusal) also turns it on."""
        mode = self.priority_mode
        header = self.scheduling.get("priority_header")
        self.scheduling = {"policy": policy, "source": source, "mode": mode}
        if header is not None:
            self.scheduling["priority_header"] = header
        if mode == "off":
            self.disable(CAP_SCHED_PRIORITY, "engine_priority_scheduling=off")
        elif policy == "priority" or (mode == "on" and policy != "fcfs"):
            self.disabled.pop(CAP_SCHED_PRIORITY, None)
            self.enable(CAP_SCHED_PRIORITY)
        else:
            self.disable(CAP_SCHED_PRIORITY, f"scheduling policy {policy} ({source})")

    # -- HTTP helpers --------------------------------------------------------------------------
    def headers(
        self, warmup: bool = True, routing: tuple[str, str] | None = None, extra: dict[str, str] | None = None
    ) -> dict[str, str]:
        h = {"content-type": "application/json"}
        if routing is not None and routing[0] in ROUTING_HEADERS:
            h[routing[0]] = routing[1]
        if extra:
            h.update(extra)
        if warmup:
            h[WARMUP_HEADER] = "1"
        if self._api_key:
            h["authorization"] = f"Bearer {self._api_key}"
        return h

    async def post_json(
        self,
        path: str,
        body: dict,
        *,
        warmup: bool = True,
        routing: tuple[str, str] | None = None,
        extra_headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        resp = await self.client.post(
            self.base_url + path,
            content=json.dumps(body, separators=(",", ":")).encode(),
            headers=self.headers(warmup, routing, extra_headers),
            timeout=self.timeout_s,
        )
        try:
            data = resp.json()
        except ValueError:
            data = None
        return resp.status_code, data

    async def get_text(self, path: str) -> tuple[int, str]:
        resp = await self.client.get(self.base_url + path, headers=self.headers(False), timeout=self.timeout_s)
        return resp.status_code, resp.text

    async def reset_prefix_cache(self) -> bool:
        if CAP_RESET not in self._caps:
            return False
        try:
            resp = await self.client.post(
                self.base_url + "/reset_prefix_cache", headers=self.headers(False), timeout=self.timeout_s
            )
        except httpx.HTTPError as exc:
            self.disable(CAP_RESET, f"{type(exc).__name__}")
            return False
        return resp.status_code < 300

    async def scrape(self) -> EngineSnapshot | None:
        return None

    async def probe(self) -> None:
        return None

    async def warm(self, action: Action) -> WarmResult:
        """Subclasses carry actions; the shared plumbing alone has no lever to pull."""
        return WarmResult(ok=False, unsupported=True, error=f"engine={self.name}: no warm lever")


def usage_tokens(data: Any) -> tuple[int, int]:
    """(prompt_tokens, cached_tokens) from an OpenAI-style response body; zeros when absent."""
    if not isinstance(data, dict):
        return 0, 0
    usage = data.get("usage") or {}
    if not isinstance(usage, dict):
        return 0, 0
    prompt = int(usage.get("prompt_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    cached = int((details.get("cached_tokens") if isinstance(details, dict) else 0) or 0)
    if not cached:
        cached = int(usage.get("cached_tokens") or 0)  # SGLang --enable-cache-report puts it here too
    return prompt, cached


def monotonic() -> float:
    return time.monotonic()
