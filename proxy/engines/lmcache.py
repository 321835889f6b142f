"""LMCache controller client: residency in the offload tier, and pinning high-survival anchors there.

Why: with vLLM `--kv-offloading-backend lmcache`, an anchor evicted from GPU memory may still sit in
the CPU/disk tier, and a warmup then *loads* it instead of recomputing it. `POST /lookup
{"tokens"}` says how much of a prefix each instance holds there; `POST /pin {"tokens",
"instance_id", "location"}` keeps it from being evicted in that tier. Both act on token ids, which
the vLLM adapter already caches per anchor. The controller is optional: any error switches the
client off with a logged reason, like an adapter capability.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import httpx

log = logging.getLogger("cachescout.engines.lmcache")


class LmcacheClient:
    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        *,
        location: str = "LocalCPUBackend",
        pin_min_priority: int = 70,
        timeout_s: float = 5.0,
    ) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.location = location
        self.pin_min_priority = pin_min_priority
        self.timeout_s = timeout_s
        self.disabled: str | None = None
        self.pinned: set[int] = set()
        self.counters = {"lookups": 0, "pins": 0, "errors": 0}

    async def _post(self, path: str, body: dict) -> Any:
        if self.disabled:
            return None
        try:
            resp = await self.client.post(self.base_url + path, json=body, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            self.counters["errors"] += 1
            self.disabled = f"{path}: {type(exc).__name__}"
            log.warning("lmcache controller disabled: %s", self.disabled)
            return None
        if resp.status_code != 200:
            self.counters["errors"] += 1
            self.disabled = f"{path} answered {resp.status_code}"
            log.warning("lmcache controller disabled: %s", self.disabled)
            return None
        try:
            return resp.json()
        except ValueError:
            return None

    async def lookup(self, tokens: Sequence[int]) -> dict[str, int]:
        """instance id -> matched prefix length (tokens) in the offload tier; {} when unknown."""
        self.counters["lookups"] += 1
        data = await self._post("/lookup", {"tokens": list(tokens)})
        if not isinstance(data, dict):
            return {}
        # Controller versions answer {"event_id", "<instance>": [location, matched]} or nest the
        # instances under "layout_info"; accept both.
        layout = data.get("layout_info") if isinstance(data.get("layout_info"), dict) else data
        out: dict[str, int] = {}
        for inst, info in layout.items():
            if isinstance(info, (list, tuple)) and len(info) >= 2 and isinstance(info[1], int):
                out[str(inst)] = info[1]
        return out

    async def maybe_pin(self, tokens: Sequence[int], priority: int) -> bool:
        """Pin a high-survival anchor in every instance that holds it; once per anchor."""
        if self.disabled or priority < self.pin_min_priority or not tokens:
            return False
        key = hash(tuple(tokens))
        if key in self.pinned:
            return False
        instances = await self.lookup(tokens)
        ok = False
        for inst, matched in instances.items():
            if matched <= 0:
                continue
            data = await self._post(
                "/pin", {"tokens": list(tokens[:matched]), "instance_id": inst, "location": self.location}
            )
            ok = ok or data is not None
        if ok:
            self.pinned.add(key)
            self.counters["pins"] += 1
        return ok

    def info(self) -> dict:
        return {"url": self.base_url, "disabled": self.disabled, "pinned": len(self.pinned), **self.counters}
