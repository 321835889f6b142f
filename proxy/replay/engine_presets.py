"""Engine calibrations for the replay (`cachescout replay --engine-preset NAME`).

Why: the default `CostModel` is an 8B model on one H100 (cost_model.py). Coding-agent contexts
(Claude Code traces: median ~110k prompt tokens) served that way would take ~22 s per cold prefill
(attention alone ~15 s at 110k), a regime no deployment serving such contexts runs in. The preset
below models a GPU-class deployment serving a 70B-class model, derived from public figures:

`h100x8-70b`: Llama-3.1/3.3-70B (80 layers, d_model 8192, 8 KV heads x 128 dims, GQA), bf16, TP8
on 8x H100-80GB SXM (vLLM / SGLang).
- Linear prefill: 2 x 70e9 FLOP/token; 8 x 989 TFLOP/s dense bf16 at ~40% MFU (long prefill in
  vLLM / SGLang reaches 35-50%) = 3.2 PFLOP/s -> 44 us/token (~23k tokens/s before attention).
- Attention: 4 x 80 layers x 8192 x p FLOP for a token at context position p = 2.6e6 p FLOP, over
  3.2 PFLOP/s -> `attn_token2_s` = 8.2e-10 s. A cold 110k-token prompt: 4.8 s linear + 5.0 s
  attention ~ 9.8 s; 100k: 8.5 s (~12k tokens/s effective).
  Check against a published figure: NVIDIA reports 472 ms TTFT for Llama 3.1 70B at a 32,768-token
  input on a GH200 NVL32 (32 Hopper GPUs; developer.nvidia.com blog "Low Latency Inference Chapter 2",
  2024); this model gives 1.87 s on 8 GPUs at 32k, i.e. 0.47 s scaled to 32 GPUs.
- Decode: 140 GB of bf16 weights / 8 GPUs = 17.5 GB per GPU at 3.35 TB/s = 5.2 ms, plus TP8
  all-reduces and launch -> `step_base_s` 10 ms (NVIDIA NIM reports 18.6 ms ITL for Llama-3.3-70B
  fp8 on 2x H100 at concurrency 1: 35 GB per GPU; docs.nvidia.com/nim/benchmarking/llm performance);
  per running sequence its KV read: 110k tokens x 320 KiB = 36 GB over 8 x 3.35 TB/s = 1.3 ms
  (`decode_seq_s`, taken at the traces' median context).
- KV bytes per token: 80 x 8 x 128 x 2 (K, V) x 2 bytes = 327,680 (320 KiB). Cache: 8 x 80 GB x 0.9
  - 140 GB weights = 436 GB -> ~1.33M tokens (~20,800 blocks of 64); the 0.25M-2M token range of the
  Claude Code table (4,000-32,000 blocks) spans a smaller memory share up to an 8x H200 node
  (8 x 141 GB: ~2.7M tokens).
- Host tier: PCIe 5.0 x16 per GPU, 8 in parallel: ~8 x 400 Gb/s effective.

`h100x8-70b-fp8`: the same node with fp8 weights (as NVIDIA NIM serves Llama-3.3-70B): GEMMs at
8 x 1,979 TFLOP/s x 40% = 6.3 PFLOP/s -> 22 us/token; attention stays bf16 (FlashAttention-3 at
~50% of 989 TFLOP/s per GPU) -> 6.6e-10 s; weights 70 GB -> 8 ms decode floor. A cold 110k prompt:
2.4 s + 4.0 s ~ 6.4 s. This is the preset the Claude Code figures use (docs/results/claude-code.md):
on the bf16 one, 32 users of 110k-token contexts saturate the node (LRU mean TTFT ~2,800 s at
8,000 blocks: a queue, not a cache, decides the figure).
"""

from __future__ import annotations

from dataclasses import replace

from proxy.cachemodel.cost_model import CostModel

_H100X8_70B = CostModel(
    step_base_s=0.010,
    prefill_token_s=44e-6,
    attn_token2_s=8.2e-10,
    decode_seq_s=1.3e-3,
    kv_bytes_per_token=327_680,
    offload_gbps=3200.0,
    offload_latency_s=0.002,
)
PRESETS: dict[str, CostModel] = {
    "h100x8-70b": _H100X8_70B,
    # fp8 weights: the linear layers twice as fast, attention as it was (bf16), a lighter step
    "h100x8-70b-fp8": replace(_H100X8_70B, step_base_s=0.008, prefill_token_s=22e-6, attn_token2_s=6.6e-10),
}


def engine_preset(name: str) -> CostModel:
    if name not in PRESETS:
        raise ValueError(f"unknown engine preset {name!r}; choose from {sorted(PRESETS)}")
    return PRESETS[name]
