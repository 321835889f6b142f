"""Measurements of one policy's replay: hit rates, prefill work, latency, and per-signal accounting.

Why per signal: a proxy acts on different kinds of knowledge (a predicted transition, a session
paused on a tool, a fan-out, a retention hint) and each can pay or not on its own. Following the
essay this evaluator is built on, each signal type is judged by
- conversion: token-weighted share of the tokens an action warmed/touched/retained that served a
  real request's prefix hit before being evicted;
- lead time: from the action to the request it served, set against the prefill time of the chain
  the action kept or warmed (a signal helps only when it arrives at least that much before the
  demand: the "early share" of converted tokens);
- yield: prefill seconds saved − warmup prefill seconds − pollution (prefill seconds of hits other
  requests lost relative to LRU, shared across signal types by acted tokens).

Bookkeeping is exact without eviction callbacks: an action leaves a pending mark on each block it
made or kept resident. A real request that hits a marked block converts every pending mark on it;
a request that misses a marked block (it was evicted) drops them; an action that re-inserts an
absent block drops the stale marks first.

Hits, loads and latencies come from the engine (`engine_run.py`): a request's GPU hit and host-tier
load are decided when the engine schedules it, its TTFT and per-turn latency are the engine's. With
a host tier each request's blocks split three ways: GPU hits, host loads (after the GPU hit) and
recompute (prefilled). `hit_rate` stays the GPU tier's; `prefill_tokens` is the recompute.
`throughput_at_budget` is the one figure not re-run on the engine: it compresses the arrival times
and re-queues each request's measured prefill work (given its hit) on a FIFO prefill server.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from proxy.cachemodel.cost_model import CostModel

if TYPE_CHECKING:
    from proxy.replay.tiers import LruHostTier, MinHostTier


@dataclass
class SignalTally:
    actions: int = 0
    acted_tokens: int = 0  # tokens warmed, touched or retained
    warm_tokens: int = 0  # tokens prefilled to execute the actions
    cost_s: float = 0.0  # engine seconds the actions took
    converted_tokens: int = 0
    saved_s: float = 0.0
    leads: list[float] = field(default_factory=list)  # seconds, one per converted mark
    lead_weights: list[int] = field(default_factory=list)  # tokens of that mark
    early_tokens: int = 0  # converted tokens whose lead time >= the prefill time of the action's chain


class RunRecorder:
    """Collects one policy's per-request outcomes, executed actions and signal marks."""

    def __init__(self, cost: CostModel, output_tokens: np.ndarray, engines: int = 1):
        self.cost = cost
        self.engines = max(1, int(engines))  # parallel prefill servers sharing the cache
        self.output_tokens = np.asarray(output_tokens, dtype=np.int64)
        n_requests = len(self.output_tokens)
        self.hit_blocks = np.zeros(n_requests, dtype=np.int64)
        self.hit_tokens = np.zeros(n_requests, dtype=np.int64)
        self.prompt_tokens = np.zeros(n_requests, dtype=np.int64)
        self.blocks = np.zeros(n_requests, dtype=np.int64)
        self.arrival = np.zeros(n_requests)
        self.action_jobs: list[tuple[float, float]] = []  # (time, engine seconds) of executed actions
        self.signals: dict[str, SignalTally] = defaultdict(SignalTally)
        self._marks: dict[int, list[tuple[str, float, int, float]]] = {}  # block -> [(reason, t, tokens, need s)]
        self.actions_by_kind: dict[str, int] = defaultdict(int)
        self.unsupported = 0
        self.tier: LruHostTier | MinHostTier | None = None  # host tier model (tiers.py) or None
        self.load_tokens = np.zeros(n_requests, dtype=np.int64)
        self.action_load_s = 0.0  # host-tier load seconds of the actions (prefetches)
        self.resume = np.zeros(n_requests, dtype=bool)  # request resumes a session paused on a tool call
        self.ttft = np.zeros(n_requests)  # the engine's: first-token step end − arrival
        self.turn = np.zeros(n_requests)  # the engine's: finish − arrival
        self.engine_steps = 0
        self.skipped_steps = 0
        self.engine_capacity = 0  # the engine's blocks (the capacity, raised to fit the largest request)
        self.host_stats: dict | None = None

    # ------------------------------------------------------------------ requests
    def request(self, i: int, t: float, hashes, tokens, hit: int, loaded_tokens: int = 0) -> None:
        hit_tok = sum(tokens[:hit])
        prompt = sum(tokens)
        self.hit_blocks[i] = hit
        self.hit_tokens[i] = hit_tok
        self.prompt_tokens[i] = prompt
        self.blocks[i] = len(hashes)
        self.arrival[i] = t
        self.load_tokens[i] = loaded_tokens
        if self.tier is not None:
            n = self.tier.on_request(i, hashes, hit)
            if n:
                self.load_tokens[i] = sum(tokens[hit : hit + n])
        if self._marks:
            self._settle(t, hashes, tokens, hit)

    def _settle(self, t: float, hashes, tokens, hit: int) -> None:
        marks = self._marks
        per_tok = self.cost.prefill_token_s
        for j, h in enumerate(hashes):
            pending = marks.pop(h, None)
            if pending is None or j >= hit:
                continue  # a miss on a marked block: it was evicted, no credit
            for reason, t_act, tok, need in pending:
                s = self.signals[reason]
                saved = per_tok * tok
                s.converted_tokens += tok
                s.saved_s += saved
                lead = t - t_act
                s.leads.append(lead)
                s.lead_weights.append(tok)
                if lead >= need:
                    s.early_tokens += tok

    # ------------------------------------------------------------------ actions
    def action(
        self,
        t: float,
        kind: str,
        reason: str,
        hashes,
        tokens,
        resident_before: int,
        resident_after: int,
        cached_before_tokens: int,
        warmed_tokens: int,
        service_s: float,
    ) -> None:
        """An executed action: `resident_before/after` are leading resident blocks of its chain."""
        s = self.signals[reason]
        s.actions += 1
        s.warm_tokens += warmed_tokens
        s.cost_s += service_s
        self.actions_by_kind[kind] += 1
        if service_s > 0:
            self.action_jobs.append((t, service_s))
        marks = self._marks
        acted = 0
        need = self.cost.chunk_s(0, sum(tokens[:resident_after]))  # prefill time of what it keeps
        for j in range(resident_after):
            h = hashes[j]
            tok = tokens[j]
            if j >= resident_before:
                marks.pop(h, None)  # it had been evicted: older marks are void
            marks.setdefault(h, []).append((reason, t, tok, need))
            acted += tok
        s.acted_tokens += acted

    # ------------------------------------------------------------------ summaries
    def summary(self, span_s: float, budget_s: float, lru: RunRecorder | None = None) -> dict:
        hit_tok = int(self.hit_tokens.sum())
        load_tok = int(self.load_tokens.sum())
        prompt = int(self.prompt_tokens.sum())
        blocks = int(self.blocks.sum())
        ttft, turn = self.latencies()
        by_req = self.ttft_by_request()
        resumes = by_req[self.resume] if self.resume.any() else np.zeros(0)
        warm_s = sum(s.cost_s for s in self.signals.values())
        out = {
            "requests": len(self.hit_tokens),
            "hit_rate": hit_tok / prompt if prompt else 0.0,
            "block_hit_rate": int(self.hit_blocks.sum()) / blocks if blocks else 0.0,
            "prompt_tokens": prompt,
            "hit_tokens": hit_tok,
            "prefill_tokens": prompt - hit_tok - load_tok,
            "gpu_hit_tokens": hit_tok,
            "host_load_tokens": load_tok,
            "recompute_tokens": prompt - hit_tok - load_tok,
            "host_load_rate": load_tok / prompt if prompt else 0.0,
            "load_s": float(self.load_s().sum()),
            "action_load_s": self.action_load_s,
            "resumes": len(resumes),
            "ttft_resume_mean_s": float(resumes.mean()) if len(resumes) else None,
            "ttft_resume_p99_s": float(np.percentile(resumes, 99)) if len(resumes) else None,
            "prefill_s": self.prefill_s_total(),
            "warmup_tokens": sum(s.warm_tokens for s in self.signals.values()),
            "warmup_s": warm_s,
            "actions": dict(self.actions_by_kind),
            "actions_per_request": sum(self.actions_by_kind.values()) / max(1, len(self.hit_tokens)),
            "ttft_mean_s": float(ttft.mean()) if len(ttft) else 0.0,
            "ttft_p50_s": float(np.percentile(ttft, 50)) if len(ttft) else 0.0,
            "ttft_p99_s": float(np.percentile(ttft, 99)) if len(ttft) else 0.0,
            "turn_mean_s": float(turn.mean()) if len(turn) else 0.0,
            "throughput_at_budget_rps": self.throughput_at_budget(span_s, budget_s),
            "latency_budget_s": budget_s,
        }
        pollution_s = 0.0
        if lru is not None:
            lost = np.clip(lru.hit_tokens - self.hit_tokens, 0, None)
            pollution_s = float(lost.sum()) * self.cost.prefill_token_s
            out["net_saved_vs_lru_s"] = float(lru.prefill_s_total() - self.prefill_s_total() - warm_s)
        out["pollution_s"] = pollution_s
        if self.tier is not None:
            out["host_tier"] = self.tier.stats()
        elif self.host_stats is not None:
            out["host_tier"] = self.host_stats
        out["engine_capacity_blocks"] = self.engine_capacity
        out["engine_steps"] = self.engine_steps
        out["engine_steps_skipped"] = self.skipped_steps
        out["signals"] = self.signal_summary(pollution_s)
        return out

    def prefill_s_total(self) -> float:
        return float(self.request_service().sum())

    def request_service(self) -> np.ndarray:
        """Each request's isolated prefill time given its hit and host-tier load (CostModel.prefill_s,
        vectorised). Engine compute only: a load runs on the host link (see `_queue`)."""
        c = self.cost
        n = (self.prompt_tokens - self.hit_tokens - self.load_tokens).astype(float)
        cached = (self.hit_tokens + self.load_tokens).astype(float)
        return c.step_base_s + c.prefill_token_s * n + c.attn_token2_s * n * (cached + n / 2)

    def load_s(self) -> np.ndarray:
        """Each request's host-tier load time (CostModel.load_s, vectorised; 0 without a load)."""
        c = self.cost
        loads = self.load_tokens.astype(float)
        return np.where(
            loads > 0, c.offload_latency_s + loads * c.kv_bytes_per_token * 8.0 / (c.offload_gbps * 1e9), 0.0
        )

    def ttft_by_request(self) -> np.ndarray:
        """The engine's TTFT, indexed by request."""
        return self.ttft

    def signal_summary(self, pollution_s: float) -> dict:
        acted_all = sum(s.acted_tokens for s in self.signals.values())
        out = {}
        for reason, s in sorted(self.signals.items()):
            share = s.acted_tokens / acted_all if acted_all else 0.0
            pol = pollution_s * share
            leads = np.array(s.leads) if s.leads else np.zeros(0)
            out[reason] = {
                "actions": s.actions,
                "acted_tokens": s.acted_tokens,
                "warm_tokens": s.warm_tokens,
                "converted_tokens": s.converted_tokens,
                "conversion": s.converted_tokens / s.acted_tokens if s.acted_tokens else 0.0,
                "lead_p10_s": float(np.percentile(leads, 10)) if len(leads) else None,
                "lead_p50_s": float(np.percentile(leads, 50)) if len(leads) else None,
                "lead_p90_s": float(np.percentile(leads, 90)) if len(leads) else None,
                "early_share": s.early_tokens / s.converted_tokens if s.converted_tokens else 0.0,
                "saved_s": s.saved_s,
                "cost_s": s.cost_s,
                "pollution_s": pol,
                "yield_s": s.saved_s - s.cost_s - pol,
            }
        return out

    def lead_samples(self) -> dict[str, list[float]]:
        return {r: list(s.leads) for r, s in self.signals.items() if s.leads}

    # ------------------------------------------------------------------ latency
    def _queue(self, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """FIFO prefill queue over `engines` servers (real requests and warm jobs share it; the
        servers share one cache, as a disaggregated KV pool does). Returns (request idx, TTFT).
        Used only by `throughput_at_budget`: every other latency is the engine's. It stays because
        the engine cannot be re-run at compressed arrivals without changing the hits, and so the
        `throughput_at_budget_rps` figure every report carries (issue 36 keeps reports identical).
        A request with a host-tier load joins the queue when its load lands (vLLM loads
        asynchronously: the request waits in WAITING_FOR_REMOTE_KVS, the batch runs on), so a load
        adds to its own TTFT but occupies no prefill server."""
        if getattr(self, "_sorted_n", -1) != len(self.action_jobs):
            real = zip(
                self.arrival.tolist(), self.request_service().tolist(), range(len(self.arrival)), self.load_s().tolist()
            )
            acts = ((t, s, -1, 0.0) for t, s in self.action_jobs)
            self._sorted = sorted([*real, *acts], key=lambda j: j[0] + j[3])
            self._sorted_n = len(self.action_jobs)
        jobs = self._sorted
        idx: list[int] = []
        ttft: list[float] = []
        if self.engines == 1:
            free = 0.0
            for t, service, i, delay in jobs:
                t = t / scale
                ready = t + delay
                start = ready if ready > free else free
                free = start + service
                if i >= 0:
                    idx.append(i)
                    ttft.append(free - t)
        else:
            servers = [0.0] * self.engines  # a heap of the servers' free times
            for t, service, i, delay in jobs:
                t = t / scale
                ready = t + delay
                f = servers[0]
                end = (ready if ready > f else f) + service
                heapq.heapreplace(servers, end)
                if i >= 0:
                    idx.append(i)
                    ttft.append(end - t)
        return np.array(idx, dtype=np.int64), np.array(ttft)

    def latencies(self) -> tuple[np.ndarray, np.ndarray]:
        """TTFT and per-turn latency per request, as the engine ran them."""
        return self.ttft, self.turn

    def throughput_at_budget(self, span_s: float, budget_s: float) -> float:
        """Largest request rate (arrival times compressed by a factor) keeping p99 TTFT <= budget."""
        n = len(self.hit_tokens)
        if n == 0 or span_s <= 0:
            return 0.0

        def ok(scale: float) -> bool:
            _, ttft = self._queue(scale)
            return bool(np.percentile(ttft, 99) <= budget_s) if len(ttft) else True

        lo, hi = 1e-3, 1.0
        if not ok(lo):
            return 0.0
        while ok(hi) and hi < 1e4:
            lo, hi = hi, hi * 2
        for _ in range(14):
            mid = (lo * hi) ** 0.5
            if ok(mid):
                lo = mid
            else:
                hi = mid
        return lo * n / span_s
