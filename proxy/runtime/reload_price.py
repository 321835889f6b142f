"""What bringing an evicted prefix back costs on this engine, measured from its own metrics.

Why: the planner prices a warm of an evicted anchor (its lead-time test and its budget charge) as a
recompute at the prefill rate unless told the engine keeps evicted KV in host memory, where it is a
*load* (issue 15). vLLM with CPU offloading exports the evidence: `vllm:external_prefix_cache_hits`
(tokens loaded), `vllm:kv_offload_total_bytes` / `vllm:kv_offload_total_time` with
`transfer_type="CPU_to_GPU"` (bytes and seconds moved), and the tier's size in GiB as the
`kv_offloading_size` label of `vllm:cache_config_info`. From scrape-to-scrape changes:
    reload rate     = Δ loaded tokens / Δ transfer seconds
    bytes per token = Δ bytes / Δ loaded tokens      (so GiB -> tokens for the host shadow)
An operator setting (`host_tier_tokens`) wins over the derived size. Until a load has been seen
the rate is unknown and the planner keeps the recompute price (the safe side).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proxy.engines.base import EngineSnapshot

MIN_TOKENS = 256  # loaded tokens timed before a rate is trusted
WINDOW = 32  # scrape deltas kept


class ReloadPrice:
    def __init__(self, host_tier_tokens: int = 0) -> None:
        self.fixed_tokens = int(host_tier_tokens)
        self._prev: tuple[float, float, float] | None = None  # (tokens, bytes, seconds) cumulative
        self._window: deque[tuple[float, float, float]] = deque(maxlen=WINDOW)
        self.gib: float | None = None
        self.seen_tier = False

    def add(self, snap: EngineSnapshot) -> None:
        """One scrape."""
        if snap.host_tier_gib:
            self.gib = float(snap.host_tier_gib)
            self.seen_tier = True
        tok, nbytes, secs = snap.external_hits, snap.offload_load_bytes, snap.offload_load_seconds
        if tok is None or nbytes is None or secs is None:
            return
        self.seen_tier = True
        prev, self._prev = self._prev, (tok, nbytes, secs)
        if prev is None:
            return
        d = (tok - prev[0], nbytes - prev[1], secs - prev[2])
        if d[0] > 0 and d[2] > 0 and d[1] >= 0:  # a counter reset gives negatives: skipped
            self._window.append(d)

    def tokens_per_s(self) -> float | None:
        tok = sum(d[0] for d in self._window)
        secs = sum(d[2] for d in self._window)
        return tok / secs if tok >= MIN_TOKENS and secs > 0 else None

    def bytes_per_token(self) -> float | None:
        tok = sum(d[0] for d in self._window)
        nbytes = sum(d[1] for d in self._window)
        return nbytes / tok if tok >= MIN_TOKENS and nbytes > 0 else None

    def host_tokens(self) -> int:
        """The host tier's size in tokens: the setting, else GiB ÷ measured bytes per token, else 0."""
        if self.fixed_tokens > 0:
            return self.fixed_tokens
        bpt = self.bytes_per_token()
        if self.gib and bpt:
            return int(self.gib * (1 << 30) / bpt)
        return 0

    def overrides(self) -> dict[str, float]:
        """PolicyConfig fields this engine's measurements set (empty until they are known)."""
        out: dict[str, float] = {}
        rate = self.tokens_per_s()
        if rate:
            out["reload_tokens_per_s"] = float(rate)
        tokens = self.host_tokens()
        if tokens:
            out["host_tier_tokens"] = int(tokens)
        return out

    def info(self) -> dict[str, object]:
        return {
            "seen_tier": self.seen_tier,
            "host_tier_gib": self.gib,
            "reload_tokens_per_s": self.tokens_per_s(),
            "bytes_per_token": self.bytes_per_token(),
            "host_tier_tokens": self.host_tokens(),
        }
