"""Simulated-engine adapter: the vLLM surface (tokenize, token-id warmups, vllm-style /metrics) plus
a retention priority when the simulator runs its priority eviction mode.

Why a separate adapter when the surface is vLLM's: the simulator can also model SGLang-style
priority eviction, and the demo and acceptance tests need to exercise that lever on a real socket.
It learns the mode from the `eviction` label of `vllm:cache_config_info` on its `/metrics`, and its
scheduling policy (the slack lane, `engines.base.CAP_SCHED_PRIORITY`) from the `scheduling_policy` /
`low_priority_values_first` labels the simulator adds there.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from proxy.core.actions import Action
from proxy.engines.base import CAP_PRIORITY
from proxy.engines.promtext import info_labels
from proxy.engines.vllm import VllmAdapter

log = logging.getLogger("cachescout.engines.sim")


class SimAdapter(VllmAdapter):
    name = "sim"

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        api_key: str | None = None,
        *,
        default_model: str = "",
        priority_on_requests: bool = False,
        timeout_s: float = 30.0,
    ) -> None:
        super().__init__(client, base_url, api_key, default_model=default_model, timeout_s=timeout_s)
        self.priority_on_requests = priority_on_requests
        self.sim_info: dict[str, Any] = {}

    async def probe(self) -> None:
        await super().probe()
        try:
            status, text = await self.get_text("/metrics")
        except httpx.HTTPError:
            status, text = 0, ""
        if status == 200:
            self.sim_info = info_labels(text, "vllm:cache_config_info")
        mode = str(self.sim_info.get("eviction", "lru"))
        if mode == "priority":
            self.enable(CAP_PRIORITY)
        else:
            self.disable(CAP_PRIORITY, f"sim eviction={mode} (priority only orders eviction in 'priority' mode)")
        policy = self.sim_info.get("scheduling_policy")
        if self.priority_mode != "off" and policy in ("fcfs", "priority", "sglang"):
            # the simulator says which policy it runs (vLLM's own /metrics does not): "priority" is
            # vLLM's (lower first), "sglang" SGLang's (higher first unless low_priority_values_first)
            if policy == "sglang":
                self.priority_sign = 1 if self.sim_info.get("low_priority_values_first") == "true" else -1
            if CAP_PRIORITY in self.capabilities and policy != "fcfs":
                self.set_scheduling("retention", "sim eviction=priority uses the same field")
            else:
                self.set_scheduling("fcfs" if policy == "fcfs" else "priority", f"sim cache_config_info {policy}")

    def warm_fields(self, action: Action) -> dict[str, Any]:
        if CAP_PRIORITY in self.capabilities:
            return {"priority": int(action.priority)}
        return super().warm_fields(action)

    def request_extras(self, survival: float | None) -> dict[str, Any]:
        if not self.priority_on_requests or CAP_PRIORITY not in self.capabilities or survival is None:
            return {}
        return {"priority": round(100 * float(survival))}
