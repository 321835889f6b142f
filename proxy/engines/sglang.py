"""SGLang adapter: warmups through the OpenAI API (or `/generate` with `input_ids`), retention priority.

SGLang's radix cache stores any prefix, so a chat warmup whose generation prompt runs past the
anchor still leaves the anchor's nodes cached. The real lever SGLang adds is retention: with
`--radix-eviction-policy priority` a request's `priority` also orders eviction (decayed by
`retention_seconds`), so warmups carry the anchor's survival-derived priority, and — opt-in —
forwarded client requests can carry one too. The adapter reads `/get_server_info` to find out
whether the engine runs that way; without it `priority` would only reorder scheduling.

Session cache (`--enable-session-radix-cache`, docs/sglang-sessions.md): the probe reads
`enable_session_radix_cache` from `/get_server_info` (capability `session_cache`). SGLang takes a
request's session only from its body's top-level `session_id` (no header), so tagging forwarded
requests alters the body and is opt-in (`session_tags`): `session_fields()` gives the field, never
over a client's own `session_id` or `session_params`. `close_session()` posts `/close_session`
(SGLang answers an empty 200, also for an unknown or closed id); it never raises.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from proxy.core.actions import Action
from proxy.engines.base import (
    CAP_METRICS,
    CAP_PRIORITY,
    CAP_SESSION_CACHE,
    CAP_WARM_TOKENS,
    EngineSnapshot,
    WarmResult,
    WarmSpec,
    usage_tokens,
)
from proxy.engines.promtext import first, mean, sample_sums
from proxy.engines.routing import ROUTING_HEADERS, apply_routing
from proxy.engines.vllm import REFUSED, VllmAdapter

log = logging.getLogger("cachescout.engines.sglang")


class SglangAdapter(VllmAdapter):
    name = "sglang"
    metric_prefix = "sglang:"

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        api_key: str | None = None,
        *,
        default_model: str = "",
        priority_on_requests: bool = False,
        session_tags: bool = False,
        timeout_s: float = 30.0,
    ) -> None:
        super().__init__(client, base_url, api_key, default_model=default_model, timeout_s=timeout_s)
        self.priority_on_requests = priority_on_requests
        self.session_tags = session_tags  # opt-in: add `session_id` to forwarded bodies (alters them)
        self.server_info: dict[str, Any] = {}
        self.counters.update({"session_closes": 0, "session_close_errors": 0})

    async def probe(self) -> None:
        try:
            for path in ("/get_server_info", "/server_info"):
                status, data = await self._get_json(path)
                if status == 200 and isinstance(data, dict):
                    self.server_info = data
                    break
            policy = str(self.server_info.get("radix_eviction_policy", ""))
            if policy == "priority":
                self.enable(CAP_PRIORITY)
            else:
                self.disable(CAP_PRIORITY, f"radix_eviction_policy={policy or 'unknown'} (needs 'priority')")
            if self.server_info.get("enable_session_radix_cache"):
                self.enable(CAP_SESSION_CACHE)
            else:
                self.disable(
                    CAP_SESSION_CACHE, "enable_session_radix_cache is off (needs --enable-session-radix-cache)"
                )
            self.default_model = self.default_model or str(self.server_info.get("served_model_name") or "")
            status, text = await self.get_text("/metrics")
            if status != 200 or self.metric_prefix not in text:
                self.disable(CAP_METRICS, f"/metrics answered {status} without sglang:* (needs --enable-metrics)")
        except httpx.HTTPError as exc:
            log.warning("engine sglang: probe failed (%s)", type(exc).__name__)
        # SGLang has no /tokenize in every version: exact tokens only when the payload carries ids.
        self.disable(CAP_WARM_TOKENS, "uses /generate only when token ids are known")
        await self.probe_scheduling()

    async def probe_scheduling(self) -> None:
        """The slack lane from `/get_server_info` (its server_args): `enable_priority_scheduling`,
        and the sign: higher values run first unless `schedule_low_priority_values_first`
        (`srt/managers/schedule_policy.py`: priority_sign = 1 if low-first else -1). With
        `--radix-eviction-policy priority` as well, one `priority` field orders both scheduling and
        retention (a node keeps the max priority of the requests that inserted it): a warmup at the
        lowest priority would be evicted first, so the retention lever wins and the lane stays off."""
        info = self.server_info
        if self.priority_mode == "off" or not info:
            reason = "engine_priority_scheduling=off" if info else "no /get_server_info"
            self.set_scheduling("unknown", reason)
            return
        self.priority_sign = 1 if info.get("schedule_low_priority_values_first") else -1
        if not info.get("enable_priority_scheduling"):
            self.set_scheduling("fcfs", "/get_server_info enable_priority_scheduling=false")
        elif CAP_PRIORITY in self.capabilities:
            self.set_scheduling("retention", "/get_server_info: radix_eviction_policy=priority uses the same field")
        else:
            self.set_scheduling("priority", "/get_server_info enable_priority_scheduling=true")

    def warm_fields(self, action: Action) -> dict[str, Any]:
        if CAP_PRIORITY in self.capabilities:
            return {"priority": int(action.priority)}
        return super().warm_fields(action)

    async def _warm(self, spec: WarmSpec, action: Action) -> WarmResult:
        extra = self.warm_fields(action)
        if spec.token_ids:
            apply_routing(spec.routing, {}, extra)
            body = {
                "input_ids": list(spec.token_ids),
                "sampling_params": {"max_new_tokens": 1, "temperature": 0},
                **extra,
            }
            self.counters["warm_requests"] += 1
            route: dict[str, Any] = (
                {"routing": spec.routing} if spec.routing and spec.routing[0] in ROUTING_HEADERS else {}
            )
            status, data = await self.post_json("/generate", body, warmup=True, **route)
            if status == 200 and isinstance(data, dict):
                meta = data.get("meta_info") or {}
                return WarmResult(
                    ok=True,
                    prompt_tokens=int(meta.get("prompt_tokens") or len(spec.token_ids)),
                    cached_tokens=int(meta.get("cached_tokens") or 0),
                )
            if status in REFUSED:
                return WarmResult(ok=False, error=f"/generate answered {status}")
        return await super()._warm(spec, action)

    def parse_metrics(self, text: str) -> EngineSnapshot:
        s = sample_sums(text)
        info = self.server_info
        capacity = _int(info.get("max_total_num_tokens"))  # KV pool size in tokens
        page = _int(info.get("page_size")) or 1
        return EngineSnapshot(
            capacity_tokens=capacity,
            capacity_blocks=capacity // page if capacity else None,
            block_size=page,
            prompt_tokens=first(s, "sglang:prompt_tokens_total"),
            hit_rate=mean(s, "sglang:cache_hit_rate"),
            kv_usage=mean(s, "sglang:token_usage"),
            running=first(s, "sglang:num_running_reqs"),
            waiting=first(s, "sglang:num_queue_reqs"),
            raw={k: v for k, v in s.items() if k.startswith("sglang:") and "#" not in k and "_bucket" not in k},
        )

    def session_fields(self, session_id: str | None, body: Any) -> dict[str, Any]:
        """`{"session_id": ...}` to add to a forwarded generation body: only when opted in, the server
        runs the session cache, the proxy knows the session, and the client named none of its own
        (`session_id` and `session_params` are SGLang's; they are mutually exclusive)."""
        if not self.session_tags or CAP_SESSION_CACHE not in self.capabilities or not session_id:
            return {}
        if not isinstance(body, dict) or "session_id" in body or body.get("session_params") is not None:
            return {}
        return {"session_id": session_id}

    async def close_session(self, session_id: str) -> bool:
        """POST /close_session; True on a 2xx. Never raises (fail-open: a failed close only leaves
        the session's KV ranked as live, as if the proxy had not judged it finished)."""
        if CAP_SESSION_CACHE not in self.capabilities:
            return False
        try:
            status, _ = await self.post_json("/close_session", {"session_id": session_id}, warmup=False)
        except httpx.HTTPError as exc:
            self.counters["session_close_errors"] += 1
            log.warning("engine sglang: /close_session failed (%s)", type(exc).__name__)
            return False
        if status >= 300:
            self.counters["session_close_errors"] += 1
            return False
        self.counters["session_closes"] += 1
        return True

    def request_extras(self, survival: float | None) -> dict[str, Any]:
        if not self.priority_on_requests or CAP_PRIORITY not in self.capabilities or survival is None:
            return {}
        return {"priority": round(100 * float(survival))}


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


__all__ = ["SglangAdapter", "usage_tokens"]
