"""Check 3: the scripted multi-agent workflow, once direct to vLLM and once through the proxy.

Why these numbers: the claim is that the proxy turns its learned agent transitions into real
prefix hits. So the oracle is vLLM's own `cached_tokens` on the workflow's requests (hit ratio =
cached / prompt tokens), with vLLM's prefix-cache counters beside it (those include the proxy's
warmups, which is why they are not the headline), client-measured TTFT, the warmup tokens vLLM
actually saw (its prompt-token counter minus the workflow's own), and the blocks vLLM evicted
(`vllm:kv_block_idle_before_evict_seconds_count` with sampling 1.0). The prefix cache is reset
before each run so both start cold; the proxy learns online during its run, so its first sessions
run without help.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import httpx
from vclient import Reply, delta, mean, metrics, p50, reset_prefix_cache, stream_chat
from workload import Workflow

SESSION_HEADER = "x-session-id"


@dataclass
class RunResult:
    name: str
    replies: list[Reply] = field(default_factory=list)
    vllm_delta: dict[str, float] = field(default_factory=dict)
    proxy_delta: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    late_from: int = 0  # index of the first turn of the "after learning" half

    def _sum(self, attr: str, start: int = 0) -> int:
        return sum(getattr(r, attr) for r in self.replies[start:])

    def hit_ratio(self, start: int = 0) -> float:
        prompt = self._sum("prompt_tokens", start)
        return self._sum("cached_tokens", start) / prompt if prompt else float("nan")

    def ttfts(self, start: int = 0) -> list[float]:
        return [r.ttft for r in self.replies[start:] if r.ttft is not None]

    def row(self) -> dict:
        v = self.vllm_delta
        queries = v.get("vllm:prefix_cache_queries_total", 0.0)
        hits = v.get("vllm:prefix_cache_hits_total", 0.0)
        workflow_prompt = self._sum("prompt_tokens")
        engine_prompt = v.get("vllm:prompt_tokens_total", 0.0)
        ttft_count = v.get("vllm:time_to_first_token_seconds_count", 0.0)
        return {
            "run": self.name,
            "requests": len(self.replies),
            "errors": sum(1 for r in self.replies if r.status != 200),
            "prompt_tokens": workflow_prompt,
            "cached_tokens": self._sum("cached_tokens"),
            "hit_ratio": self.hit_ratio(),
            "hit_ratio_late": self.hit_ratio(self.late_from),
            "vllm_counter_hit_ratio": hits / queries if queries else float("nan"),
            "ttft_mean_ms": 1000 * mean(self.ttfts()),
            "ttft_p50_ms": 1000 * p50(self.ttfts()),
            "ttft_mean_late_ms": 1000 * mean(self.ttfts(self.late_from)),
            "vllm_ttft_mean_ms": (
                1000 * v.get("vllm:time_to_first_token_seconds_sum", 0.0) / ttft_count if ttft_count else float("nan")
            ),
            "warmup_tokens_vllm": engine_prompt - workflow_prompt,
            "warmup_tokens_proxy": self.proxy_delta.get("cachescout_warmup_tokens_total", 0.0),
            "evicted_blocks": v.get("vllm:kv_block_idle_before_evict_seconds_count", 0.0),
            "wall_s": self.seconds,
            "per_turn_cached": " ".join(f"{r.cached_tokens // 32}/{r.prompt_tokens // 32}" for r in self.replies),
        }


def run_workflow(
    client: httpx.Client,
    vllm: str,
    base: str,
    wf: Workflow,
    model: str,
    *,
    name: str,
    gap_s: float,
    salt: str | None,
    proxy: str | None = None,
    settle_s: float = 2.0,
    log=print,
) -> RunResult:
    """Reset vLLM's prefix cache, drive every turn of `wf` through `base`, return the measurements."""
    reset_prefix_cache(client, vllm)
    time.sleep(0.2)
    v0 = metrics(client, vllm)
    p0 = metrics(client, proxy) if proxy else {}
    res = RunResult(name=name, late_from=len(wf.turns) // 2)
    t0 = time.perf_counter()
    for turn in wf.turns:
        reply = stream_chat(client, base, wf.body(turn, model, salt=salt), headers={SESSION_HEADER: turn.session})
        if reply.status != 200:
            log(f"  [{name}] turn {turn.index} {turn.agent.name}: HTTP {reply.status} {reply.error}")
        res.replies.append(reply)
        time.sleep(gap_s)  # the framework's own time between agent turns
    res.seconds = time.perf_counter() - t0
    time.sleep(settle_s)  # let in-flight warmups finish before reading counters
    v1 = metrics(client, vllm)
    res.vllm_delta = {k: delta(v1, v0, k) for k in v1}
    if proxy:
        p1 = metrics(client, proxy)
        res.proxy_delta = {k: delta(p1, p0, k) for k in p1 if k.startswith("cachescout_")}
        res.proxy_delta["agents_gauge"] = p1.get("cachescout_agents", float("nan"))
    return res


COLUMNS = (
    ("run", "{}"),
    ("requests", "{:d}"),
    ("hit_ratio", "{:.1%}"),
    ("hit_ratio_late", "{:.1%}"),
    ("vllm_counter_hit_ratio", "{:.1%}"),
    ("ttft_mean_ms", "{:.0f}"),
    ("ttft_p50_ms", "{:.0f}"),
    ("ttft_mean_late_ms", "{:.0f}"),
    ("vllm_ttft_mean_ms", "{:.0f}"),
    ("warmup_tokens_vllm", "{:.0f}"),
    ("warmup_tokens_proxy", "{:.0f}"),
    ("evicted_blocks", "{:.0f}"),
    ("wall_s", "{:.0f}"),
)


def table(rows: list[dict]) -> str:
    """Markdown table of the measured runs (also written to the job's output dir)."""
    head = "| " + " | ".join(c for c, _ in COLUMNS) + " |"
    sep = "|" + "|".join(" --- " for _ in COLUMNS) + "|"
    lines = [head, sep]
    for row in rows:
        cells = []
        for col, fmt in COLUMNS:
            value = row.get(col)
            try:
                cells.append(fmt.format(value))
            except (ValueError, TypeError):
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
