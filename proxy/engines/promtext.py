"""Minimal reading of an engine's Prometheus text exposition.

Engines label their series (model name, engine index); the proxy wants one number per metric, so
samples with the same name are summed (counters, queue gauges) — except ratios, which callers read
with `mean`. Uses prometheus_client's own parser so odd formatting is the library's problem.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def sample_sums(text: str) -> dict[str, float]:
    """name -> sum of all samples with that exact sample name (e.g. 'vllm:prefix_cache_hits_total')."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            sums[s.name] = sums.get(s.name, 0.0) + float(s.value)
            counts[s.name] = counts.get(s.name, 0) + 1
    sums.update({f"{k}#n": float(v) for k, v in counts.items()})
    return sums


def label_sum(text: str, name: str, label: str, value: str) -> float | None:
    """Sum of the samples named `name` whose `label` equals `value` (case-insensitive); None if none."""
    total, seen = 0.0, False
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and str(s.labels.get(label, "")).lower() == value.lower():
                total += float(s.value)
                seen = True
    return total if seen else None


def first(sums: dict[str, float], *names: str) -> float | None:
    for n in names:
        if n in sums:
            return sums[n]
    return None


def mean(sums: dict[str, float], *names: str) -> float | None:
    for n in names:
        if n in sums:
            return sums[n] / max(1.0, sums.get(f"{n}#n", 1.0))
    return None


def info_labels(text: str, name: str) -> dict[str, str]:
    """Labels of the first sample of an info-style metric (e.g. vllm:cache_config_info)."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in (name, name + "_info") or family.name == name:
                return dict(s.labels)
    return {}
