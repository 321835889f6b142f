"""The host-memory tier in the replay: every policy's GPU cache gets the same CPU tier behind it.

Why outside the policies: a host tier (vLLM native CPU offloading, LMCache) is the *engine's*, not
the proxy's; a policy only changes what the GPU tier holds and which actions run. So the run's
recorder asks the tier, for each request, how many of the blocks after the policy's GPU hit can be
loaded instead of recomputed, and `execute_on_pool` asks it the same for a touch/warm (a warm of an
evicted anchor is then a *prefetch*: a load, not a prefill). The tier follows `proxy.cachemodel.host_tier`
(write-through of every block a request or action computed or loaded, its own LRU).

Belady with two tiers (`MinHostTier`): MIN with bypass on the GPU capacity (the existing bound) and,
independently, MIN with bypass on the host capacity over the same write-through stream; a request
loads the blocks of the host tier's prefix hit beyond its GPU hit. Each tier is individually
optimal for prefix block hits, so no LRU-managed tier beats it on either hit count; this is a
documented bound per tier, not a proven joint optimum of load + recompute time (a joint optimum
could trade a GPU hit of one prefix for host room of another).
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.cachemodel.host_tier import HostTier
from proxy.replay.belady import belady_hits


def resolve_cpu_capacity(spec: str | float | int | None, gpu_blocks: int, unique_blocks: int) -> int:
    """`4x`: a multiple of the GPU capacity; `0.2` (below 1) or `20%`: a share of the stream's unique
    blocks; an integer >= 1: blocks; None/0: no host tier."""
    if spec is None:
        return 0
    if isinstance(spec, str):
        spec = spec.strip().lower()
        if not spec:
            return 0
        if spec.endswith("x"):
            return round(float(spec[:-1]) * gpu_blocks)
        if spec.endswith("%"):
            return round(float(spec[:-1]) / 100.0 * unique_blocks)
        spec = float(spec)
    if spec < 0:
        raise ValueError("cpu capacity must be >= 0")
    if 0 < spec < 1:
        return round(float(spec) * unique_blocks)
    return int(spec)


class LruHostTier:
    """The engine's CPU tier as vLLM's native offloading runs it (LRU, write-through)."""

    bound = False

    def __init__(self, capacity_blocks: int):
        self.tier = HostTier(capacity_blocks)

    def on_request(self, i: int, hashes: Sequence[int], gpu_hit: int) -> int:
        """Blocks after the GPU hit loaded from the tier; then the whole chain is written through."""
        tier = self.tier
        n = tier.lookup(hashes, gpu_hit)
        if n:
            tier.load(hashes[gpu_hit : gpu_hit + n])
        tier.store(hashes)
        return n

    def on_action(self, hashes: Sequence[int], before: int, after: int) -> int:
        """A touch/warm that made blocks [before, after) resident: how many of them it loaded."""
        tier = self.tier
        n = tier.lookup(hashes, before, after)
        if n:
            tier.load(hashes[before : before + n])
        tier.store(hashes[:after])
        return n

    def stats(self) -> dict:
        st = self.tier.stats()
        return {
            "capacity_blocks": st.capacity,
            "lookups": st.lookups,
            "hits": st.hits,
            "stores": st.stores,
            "loads": st.loads,
            "evictions": st.evictions,
        }


class MinHostTier:
    """Belady's host tier: MIN with bypass on the host capacity (precomputed over the stream)."""

    bound = True

    def __init__(self, capacity_blocks: int, block_lists: Sequence[Sequence[int]]):
        self.capacity = int(capacity_blocks)
        self.hits = belady_hits(block_lists, self.capacity) if self.capacity > 0 else [0] * len(block_lists)
        self.loads = 0

    def on_request(self, i: int, hashes: Sequence[int], gpu_hit: int) -> int:
        n = max(0, self.hits[i] - gpu_hit)
        self.loads += n
        return n

    def on_action(self, hashes: Sequence[int], before: int, after: int) -> int:
        return 0  # Belady runs no actions

    def stats(self) -> dict:
        return {"capacity_blocks": self.capacity, "loads": self.loads, "bound": "MIN per tier"}
