"""Priority (SGLang) mode exports SGLang's TTFT histogram; LRU (vLLM) mode does not."""

from prometheus_client.parser import text_string_to_metric_families

from tests.sim.conftest import MODEL, make_client


def samples(text: str) -> dict[str, float]:
    """name -> value; histogram buckets keyed as name{le}."""
    out = {}
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            out[s.name + (f"{{{s.labels['le']}}}" if "le" in s.labels else "")] = s.value
    return out


async def _ttft_samples(eviction: str) -> dict[str, float]:
    c = make_client(eviction=eviction, output_tokens=2)
    try:
        for i in range(3):
            r = await c.post("/v1/completions", json={"model": MODEL, "prompt": [100 + i] * 40, "max_tokens": 2})
            assert r.status_code == 200
        return samples((await c.get("/metrics")).text)
    finally:
        await c.sim.close()
        await c.aclose()


async def test_priority_mode_exports_sglang_ttft_histogram():
    m = await _ttft_samples("priority")
    assert m["sglang:time_to_first_token_seconds_count"] == 3
    assert m["sglang:time_to_first_token_seconds_sum"] == m["vllm:time_to_first_token_seconds_sum"]
    assert m["sglang:time_to_first_token_seconds_bucket{+Inf}"] == 3


async def test_lru_mode_has_no_sglang_series():
    m = await _ttft_samples("lru")
    assert m["vllm:time_to_first_token_seconds_count"] == 3
    assert not any(k.startswith("sglang:") for k in m)
