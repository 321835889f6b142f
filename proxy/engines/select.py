"""Choose the engine adapter: by setting, or by probing the engine at start.

Probing order: the simulated engine exports `cachescout_sim_*` beside its vllm-style series on
`/metrics`; SGLang answers `/get_server_info`; vLLM exports `vllm:*` series on `/metrics`.
When nothing answers (engine not up yet), auto falls back to the vLLM adapter, whose surface
(OpenAI API + /tokenize) is the most common; its capabilities are
then corrected by its own probe and by errors at run time.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from proxy.core.actions import Action
from proxy.engines.base import EngineSnapshot, HttpEngineAdapter, WarmResult
from proxy.engines.sglang import SglangAdapter
from proxy.engines.sim import SimAdapter
from proxy.engines.vllm import VllmAdapter

log = logging.getLogger("cachescout.engines")

KINDS = ("auto", "vllm", "sglang", "sim", "none")


class NoEngineAdapter(HttpEngineAdapter):
    """engine=none: the proxy observes and learns but never acts on the engine."""

    name = "none"

    async def warm(self, action: Action) -> WarmResult:
        return WarmResult(ok=False, unsupported=True, error="engine=none")

    async def scrape(self) -> EngineSnapshot | None:
        return None


async def detect_kind(client: httpx.AsyncClient, base_url: str, headers: dict[str, str] | None = None) -> str:
    base = base_url.rstrip("/")
    try:
        r = await client.get(base + "/metrics", headers=headers, timeout=3.0)
        if r.status_code == 200 and "cachescout_sim_" in r.text:
            return "sim"
        info = await client.get(base + "/get_server_info", headers=headers, timeout=3.0)
        if info.status_code == 200:
            return "sglang"
        if r.status_code == 200 and "sglang:" in r.text:
            return "sglang"
        if r.status_code == 200 and "vllm:" in r.text:
            return "vllm"
    except httpx.HTTPError as exc:
        log.warning("engine probe failed (%s); assuming vLLM", type(exc).__name__)
    return "vllm"


def make_adapter(
    kind: str,
    client: httpx.AsyncClient,
    base_url: str,
    api_key: str | None,
    *,
    model: str = "",
    kv_hints: bool = False,
    request_priority: bool = False,
    priority_scheduling: str = "auto",
    priority_header: str = "auto",
) -> HttpEngineAdapter:
    adapter: HttpEngineAdapter
    if kind == "vllm":
        adapter = VllmAdapter(client, base_url, api_key, default_model=model, kv_hints=kv_hints)
    elif kind == "sglang":
        adapter = SglangAdapter(client, base_url, api_key, default_model=model, priority_on_requests=request_priority)
    elif kind == "sim":
        adapter = SimAdapter(client, base_url, api_key, default_model=model, priority_on_requests=request_priority)
    elif kind == "none":
        adapter = NoEngineAdapter(client, base_url, api_key)
    else:
        raise ValueError(f"unknown engine kind {kind!r}")
    adapter.priority_mode = priority_scheduling
    adapter.priority_header_mode = priority_header
    return adapter


async def build_adapter(
    kind: str, client: httpx.AsyncClient, base_url: str, api_key: str | None, **kwargs: Any
) -> HttpEngineAdapter:
    """Pick (probing when kind == 'auto'), build, and probe the adapter's capabilities."""
    if kind == "auto":
        auth = {"authorization": f"Bearer {api_key}"} if api_key else None
        kind = await detect_kind(client, base_url, auth)
    adapter = make_adapter(kind, client, base_url, api_key, **kwargs)
    await adapter.probe()
    return adapter
