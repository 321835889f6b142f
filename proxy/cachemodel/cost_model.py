"""Step-time cost model for the simulated engine (virtual seconds).

Why a step model: vLLM runs continuous batching; one forward pass ("step") carries the decode token
of every running request plus prefill chunks, up to a token budget. Its time is a fixed overhead
(reading the weights, launch costs) plus a compute term that grows with the prefill tokens and, for
long contexts, with attention over the context already in the cache.

    step_s = step_base_s
           + prefill_token_s   * Σ chunk_tokens
           + attn_token2_s     * Σ chunk_tokens * (chunk_start + chunk_tokens / 2)
           + decode_seq_s      * decoding_requests

Defaults: Llama-3.1-8B (bf16) on one H100-80GB with vLLM —
- `prefill_token_s` = 1/15,000 s: prefill runs ~12–20k tokens/s for 8B at 1–8k-token prompts;
- `attn_token2_s` = 2.4e-9 s: makes an 8k-token cold prefill ~15% slower than linear (attention
  share at 8k), and a 32k one ~60% slower;
- `step_base_s` = 6 ms: 16 GB of weights over ~3.3 TB/s HBM is ~5 ms, plus launch overhead; this is
  the floor of every decode step (so ~160 tokens/s for a single stream);
- `decode_seq_s` = 60 µs per running request: KV reads and sampling; 64 streams → ~10 ms steps,
  ~6.6k output tokens/s.
- KV cache: 128 KiB/token (32 layers × 8 KV heads × 128 dims × 2 (K,V) × 2 bytes); ~56 GB left
  after weights at 0.9 utilisation → ~458k tokens = 28,672 blocks of 16 (the CLI default).
A fully cached 2,000-token prompt then costs one recomputed block (≈7 ms) instead of ≈140 ms cold.

Host tier (CPU offloading, `host_tier.py`): a block found in host memory is loaded, not prefilled:

    load_s = offload_latency_s + tokens × kv_bytes_per_token × 8 / (offload_gbps × 1e9)

- `kv_bytes_per_token` = 128 KiB (the 8B model above; a 70B-class model with GQA is 320 KiB);
- `offload_gbps` = 400 Gb/s effective host→GPU (PCIe 5.0 x16 is 512 Gb/s raw per direction);
- `offload_latency_s` = 2 ms per load: vLLM's asynchronous load costs the request at least one
  scheduler step in WAITING_FOR_REMOTE_KVS.
A 10,000-token prefix then loads in ≈28 ms instead of ≈0.8 s of prefill.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CostModel:
    step_base_s: float = 0.006
    prefill_token_s: float = 1.0 / 15_000
    attn_token2_s: float = 2.4e-9
    decode_seq_s: float = 60e-6
    kv_bytes_per_token: int = 131_072
    offload_gbps: float = 400.0
    offload_latency_s: float = 0.002

    def __post_init__(self) -> None:
        if self.offload_gbps <= 0:
            raise ValueError("offload_gbps must be > 0")
        for name in (
            "step_base_s",
            "prefill_token_s",
            "attn_token2_s",
            "decode_seq_s",
            "kv_bytes_per_token",
            "offload_latency_s",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")

    def chunk_s(self, start: int, tokens: int) -> float:
        """Compute time of a prefill chunk of `tokens` starting at context position `start`."""
        return self.prefill_token_s * tokens + self.attn_token2_s * tokens * (start + tokens / 2)

    def step_s(self, chunks: Sequence[tuple[int, int]], decoding: int) -> float:
        """One forward pass: `chunks` = (start, tokens) per prefill chunk, `decoding` = decode rows."""
        if not chunks and decoding <= 0:
            return 0.0
        return self.step_base_s + sum(self.chunk_s(s, n) for s, n in chunks) + self.decode_seq_s * max(decoding, 0)

    def prefill_s(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        """Isolated prefill time (one step, no batching): for docs, tests and quick estimates."""
        n = max(prompt_tokens - cached_tokens, 0)
        return self.step_s([(cached_tokens, n)], 0)

    def load_bytes(self, tokens: int) -> int:
        """Bytes moved between host memory and the GPU for `tokens` tokens of KV."""
        return max(int(tokens), 0) * self.kv_bytes_per_token

    def transfer_s(self, tokens: int) -> float:
        """Wire time of `tokens` tokens of KV over the host link (no per-request latency)."""
        return self.load_bytes(tokens) * 8.0 / (self.offload_gbps * 1e9)

    def load_s(self, tokens: int) -> float:
        """Time to bring `tokens` tokens back from the host tier (0 when there is nothing to load)."""
        if tokens <= 0:
            return 0.0
        return self.offload_latency_s + self.transfer_s(tokens)
