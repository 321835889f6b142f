"""Fixtures for the live acceptance tests: the simulated engine and the proxy on real sockets."""

from __future__ import annotations

import httpx
import pytest

from proxy.settings import Settings
from proxy.simengine.service import SimConfig

MODEL = "sim-llama-3.1-8b"
ADMIN = "admin-secret"


def agent_prompts(n: int = 3, words: int = 150) -> dict[str, str]:
    """Long, distinct system prompts: each anchor spans many 16-token blocks."""
    return {
        chr(65 + i): f"You are agent {chr(65 + i)}. " + " ".join(f"rule{i}x{k} holds" for k in range(words))
        for i in range(n)
    }


def proxy_settings(engine_url: str, **kw) -> Settings:
    base = {
        "upstream_url": engine_url,
        "engine": "auto",
        "scrape_interval": 0.1,
        "admin_token": ADMIN,
        "upstream_transport": "httpx",
        "policy_plan_interval": 0.05,
        "engine_api_key": "proxy-own-key",
    }
    base.update(kw)
    return Settings(**base)


def sim_config(**kw) -> SimConfig:
    base = {"speed": 0, "capacity_blocks": 160, "output_tokens": 8, "output_jitter": 0.0, "model": MODEL}
    base.update(kw)
    return SimConfig(**base)


def engine_hits(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    for line in text.splitlines():
        if line.startswith("vllm:prefix_cache_hits_total"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def chat(
    client: httpx.Client,
    url: str,
    system: str,
    history: list[dict],
    session: str,
    salt: str | None = None,
    headers: dict | None = None,
) -> dict:
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": system}, *history],
        "max_tokens": 8,
        "user": session,
    }
    if salt:
        body["cache_salt"] = salt
    r = client.post(url + "/v1/chat/completions", json=body, headers=headers or {})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def http():
    with httpx.Client(timeout=20) as c:
        yield c
