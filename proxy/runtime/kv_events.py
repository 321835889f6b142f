"""Optional vLLM KV-events subscriber (ZMQ + msgpack): the engine's exact residency, as it changes.

vLLM started with `--kv-events-config '{"enable_kv_cache_events":true,"publisher":"zmq",
"endpoint":"tcp://*:5557","topic":""}'` publishes multipart messages `[topic, seq(8 bytes BE),
payload]`; the payload is a msgspec array-like `KVEventBatch(ts, events, data_parallel_rank)`.
vLLM 0.32 sends each event as a map tagged under `"type"` (`{"type": "BlockStored",
"block_hashes", "parent_block_hash", "token_ids", "block_size", "medium", ...}`); older releases
sent tagged arrays (`["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
lora_id, medium]`, `["BlockRemoved", block_hashes, medium]`, `["AllBlocksCleared"]`). Both decode.
A `BlockStored` map may carry `"session_id"`: vLLM PR #51381 ("[Core][KV Events] Echo session_id on
GPU BlockStored events", merged 2026-08) adds it to `BlockStored` in `vllm/distributed/kv_events.py`
as an optional field (default None, so `omit_defaults` leaves it out for requests without a
session): the session id of the request that triggered the store (body `session_id`, `X-Session-ID`
or `vllm_xargs.session_id`), not an owner list (a block shared by sessions names the first). The
snapshot of that file read for this (commit 0181ea3) predates the PR and has no such field: the name
follows the PR and issue 38; a release without it simply never sends one. `BlockRemoved` carries no
session. The subscriber reads it from the map form only; `LiveRuntime` feeds it to the core's
residency by session (`core/session_residency.py`).

Why re-key by tokens: vLLM's block hashes depend on its hash function and seed, which the proxy
cannot reproduce; but BlockStored carries each block's token ids. Chaining our own xxh3 over
(parent chain, tokens) gives a key the proxy *can* compute for any anchor whose token ids it holds
(the vLLM adapter caches them), so "how much of this anchor is resident right now" has an exact
answer. pyzmq and msgpack are optional (`cachescout[kvevents]`); without them the subscriber reports
why it is off and the proxy runs on its residency shadow alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import xxhash

log = logging.getLogger("cachescout.kv_events")


@dataclass(frozen=True, slots=True)
class KvEvent:
    kind: str  # "stored" | "removed" | "cleared"
    block_hashes: tuple[Any, ...] = ()
    parent: Any = None
    token_ids: tuple[int, ...] = ()
    block_size: int = 0
    medium: str | None = None
    session_id: str | None = None  # BlockStored: the session of the request that stored the blocks


def token_chain(parent: int | None, tokens: Sequence[int]) -> int:
    h = xxhash.xxh3_64()
    h.update((parent or 0).to_bytes(8, "little"))
    h.update(b"".join(int(t).to_bytes(4, "little", signed=False) for t in tokens))
    return h.intdigest()


def token_chain_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chain keys of the full blocks of a token sequence (partial last block excluded, like vLLM)."""
    out: list[int] = []
    parent: int | None = None
    for i in range(0, len(token_ids) - block_size + 1, block_size):
        parent = token_chain(parent, token_ids[i : i + block_size])
        out.append(parent)
    return out


def _map_to_array(ev: dict) -> list:
    """vLLM 0.32's tagged-map event as the older positional array (one decoder for both)."""
    tag = ev.get("type")
    if tag == "BlockStored":
        return [
            tag,
            ev.get("block_hashes"),
            ev.get("parent_block_hash"),
            ev.get("token_ids"),
            ev.get("block_size"),
            ev.get("lora_id"),
            ev.get("medium"),
        ]
    if tag == "BlockRemoved":
        return [tag, ev.get("block_hashes"), ev.get("medium")]
    return [tag] if isinstance(tag, str) else []


def decode_batch(payload: bytes) -> list[KvEvent]:
    """Decode one msgpack KVEventBatch payload; unknown event tags are skipped."""
    import msgpack  # optional dependency

    batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    events = batch[1] if isinstance(batch, (list, tuple)) and len(batch) >= 2 else []
    out: list[KvEvent] = []
    for ev in events:
        session: str | None = None
        if isinstance(ev, dict):
            sid = ev.get("session_id")  # map form only: an array's positions past `medium` vary by release
            session = sid if isinstance(sid, str) and sid else None
            ev = _map_to_array(ev)
        if not isinstance(ev, (list, tuple)) or not ev:
            continue
        tag = ev[0]
        if tag == "BlockStored":
            out.append(
                KvEvent(
                    "stored",
                    tuple(ev[1] or ()),
                    ev[2] if len(ev) > 2 else None,
                    tuple(ev[3] or ()) if len(ev) > 3 else (),
                    int(ev[4] or 0) if len(ev) > 4 else 0,
                    ev[6] if len(ev) > 6 else None,
                    session,
                )
            )
        elif tag == "BlockRemoved":
            out.append(KvEvent("removed", tuple(ev[1] or ()), medium=ev[2] if len(ev) > 2 else None))
        elif tag == "AllBlocksCleared":
            out.append(KvEvent("cleared"))
    return out


class KvResidency:
    """Engine hash -> token-chain key, and the set of resident token-chain keys (GPU tier only)."""

    def __init__(self, max_blocks: int = 1_000_000) -> None:
        self.by_engine: dict[Any, int] = {}
        self.resident: set[int] = set()
        self.max_blocks = max_blocks
        self.counts = {"stored": 0, "removed": 0, "cleared": 0}

    def apply(self, ev: KvEvent) -> None:
        self.counts[ev.kind] += len(ev.block_hashes) if ev.kind != "cleared" else 1
        if ev.medium not in (None, "GPU", "gpu"):
            return
        if ev.kind == "cleared":
            self.by_engine.clear()
            self.resident.clear()
        elif ev.kind == "stored":
            parent_key = self.by_engine.get(ev.parent) if ev.parent is not None else None
            bs = ev.block_size or (len(ev.token_ids) // max(1, len(ev.block_hashes)))
            for i, eh in enumerate(ev.block_hashes):
                toks = ev.token_ids[i * bs : (i + 1) * bs]
                parent_key = token_chain(parent_key, toks)
                if len(self.by_engine) < self.max_blocks:
                    self.by_engine[eh] = parent_key
                    self.resident.add(parent_key)
        elif ev.kind == "removed":
            for eh in ev.block_hashes:
                key = self.by_engine.pop(eh, None)
                if key is not None:
                    self.resident.discard(key)

    def resident_prefix_blocks(self, token_ids: Sequence[int], block_size: int) -> int:
        n = 0
        for key in token_chain_hashes(token_ids, block_size):
            if key not in self.resident:
                break
            n += 1
        return n


class KvEventSubscriber:
    """SUB socket on the engine's publisher; applies events to a KvResidency, calls `on_event`."""

    def __init__(self, endpoint: str, topic: str = "", on_event: Callable[[KvEvent], None] | None = None) -> None:
        self.endpoint = endpoint
        self.topic = topic
        self.on_event = on_event
        self.residency = KvResidency()
        self.error: str | None = None
        self.messages = 0
        self.last_seq: int | None = None
        self.gaps = 0
        self._task: asyncio.Task | None = None
        self._sock: Any = None
        self._ctx: Any = None

    async def start(self) -> bool:
        try:
            import msgpack  # noqa: F401
            import zmq
            import zmq.asyncio
        except ImportError as exc:
            self.error = f"kv events need pyzmq and msgpack: {exc}"
            log.warning(self.error)
            return False
        self._ctx = zmq.asyncio.Context()
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(self.endpoint)
        self._sock.setsockopt_string(zmq.SUBSCRIBE, self.topic)
        self._task = asyncio.create_task(self._loop(), name="cachescout-kv-events")
        return True

    async def _loop(self) -> None:
        while True:
            parts = await self._sock.recv_multipart()
            try:
                self._handle(parts)
            except Exception as exc:  # noqa: BLE001 - a bad message must not stop the stream
                self.error = f"{type(exc).__name__}: {exc}"[:200]

    def _handle(self, parts: list[bytes]) -> None:
        if len(parts) < 2:
            return
        payload = parts[-1]
        if len(parts) >= 3 and len(parts[-2]) == 8:
            seq = int.from_bytes(parts[-2], "big")
            if self.last_seq is not None and seq != self.last_seq + 1:
                self.gaps += 1  # missed messages: the view may be stale until the next clear
            self.last_seq = seq
        self.messages += 1
        for ev in decode_batch(payload):
            self.residency.apply(ev)
            if self.on_event is not None:
                self.on_event(ev)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def info(self) -> dict:
        return {
            "endpoint": self.endpoint,
            "messages": self.messages,
            "gaps": self.gaps,
            "error": self.error,
            "resident_blocks": len(self.residency.resident),
            **self.residency.counts,
        }
