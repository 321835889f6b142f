"""Chained block hashes, as vLLM's prefix cache computes them (shape, not bit-exact values).

Why chained: a block is only reusable when the *whole* prefix before it is equal, so block i's hash
covers block i-1's hash plus block i's tokens. Only full blocks are hashed (a partial tail block is
never cached). `cache_salt` enters the first block's hash (vLLM puts it in the first block's extra
keys), so the whole chain of a salted request differs from the unsalted one and from other salts.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import xxhash

ROOT_HASH = 0x9E3779B97F4A7C15  # chain seed for the first block (no parent)


def block_hash(parent: int, tokens: Sequence[int], salt: str | None = None) -> int:
    """xxh3_64 over parent hash (8 bytes LE) + uint32 LE token ids (+ salt bytes)."""
    h = xxhash.xxh3_64()
    h.update(parent.to_bytes(8, "little"))
    h.update(array("I", tokens).tobytes())
    if salt:
        h.update(b"\x00salt\x00" + salt.encode("utf-8"))
    return h.intdigest()


def chain_hashes(token_ids: Sequence[int], block_size: int, salt: str | None = None) -> list[int]:
    """Hashes of every *full* block of `token_ids`; equal prefixes give equal leading hashes."""
    if block_size <= 0:
        raise ValueError("block_size must be > 0")
    out: list[int] = []
    parent = ROOT_HASH
    n_full = len(token_ids) // block_size
    for i in range(n_full):
        parent = block_hash(parent, token_ids[i * block_size : (i + 1) * block_size], salt if i == 0 else None)
        out.append(parent)
    return out


def extend_chain(prev: Sequence[int], token_ids: Sequence[int], block_size: int, salt: str | None = None) -> list[int]:
    """Hashes for `token_ids` reusing `prev` (hashes of a prefix of the same tokens): computes only
    the new full blocks. Used when a running request's generated tokens fill more blocks."""
    out = list(prev)
    parent = out[-1] if out else ROOT_HASH
    for i in range(len(out), len(token_ids) // block_size):
        parent = block_hash(parent, token_ids[i * block_size : (i + 1) * block_size], salt if i == 0 else None)
        out.append(parent)
    return out
