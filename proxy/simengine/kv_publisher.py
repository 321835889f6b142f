"""Publish the simulated engine's KV events the way vLLM does (ZMQ PUB + msgpack).

Why: the proxy's KV-events subscriber (`proxy/runtime/kv_events.py`) gets an exact residency view
from a real vLLM started with `--kv-events-config`; the sim offers the same stream so that path can
be exercised without a GPU, and so can a KV-aware router (`vllm-router --policy kv_aware
--kv-event-source ...`, which decodes exactly this format). Wire format (vLLM 0.32
`ZmqEventPublisher`, `vllm/distributed/kv_events.py`): multipart `[topic, seq (8 bytes,
big-endian), payload]`, payload = msgpack `KVEventBatch` as an array `[ts, events,
data_parallel_rank]` (msgspec `array_like=True`), each event a map tagged by class name under
`"type"` (msgspec `tag=True`, `omit_defaults=True`): `{"type": "BlockStored", "block_hashes",
"parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"}`,
`{"type": "BlockRemoved", "block_hashes", "medium"}`, `{"type": "AllBlocksCleared"}`. A
`BlockStored` also carries `"session_id"` when the request that stored the blocks had one (vLLM PR
#51381, "Echo session_id on GPU BlockStored events": an optional field, default None, so with
`omit_defaults` it is absent for requests without a session; the id of the request that triggered
the store, not an owner list: a block shared by several sessions names the first). (Older vLLM
releases sent events as tagged arrays; the proxy's subscriber reads both.) The engine records
events as tuples in the array order; `to_wire` turns each into the map.
pyzmq and msgpack are optional dependencies (`cachescout[kvevents]`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence


def to_wire(event: tuple) -> dict:
    """One engine event tuple (`("BlockStored", hashes, parent, tokens, block_size, lora_id,
    medium[, session_id])`, `("BlockRemoved", hashes, medium)`, `("AllBlocksCleared",)`) as vLLM 0.32's map."""
    tag = event[0]
    if tag == "BlockStored":
        _, hashes, parent, tokens, block_size, lora_id, medium, *rest = event
        out = {
            "type": tag,
            "block_hashes": list(hashes),
            "parent_block_hash": parent,
            "token_ids": list(tokens),
            "block_size": block_size,
            "lora_id": lora_id,
            "medium": medium,
            "lora_name": None,
        }
        if rest and rest[0] is not None:  # omit_defaults: vLLM sends session_id only when set
            out["session_id"] = rest[0]
        return out
    if tag == "BlockRemoved":
        return {"type": tag, "block_hashes": list(event[1]), "medium": event[2]}
    return {"type": tag}


class KvEventPublisher:
    def __init__(self, endpoint: str, topic: str = ""):
        import msgpack
        import zmq

        self._msgpack, self._zmq = msgpack, zmq
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(endpoint)
        self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)  # resolves "tcp://127.0.0.1:*"
        self.topic = topic.encode()
        self.seq = 0
        self.dropped = 0

    def publish(self, events: Sequence[tuple], ts: float | None = None) -> None:
        if not events:
            return
        payload = self._msgpack.packb(
            [time.time() if ts is None else ts, [to_wire(e) for e in events], 0], use_bin_type=True
        )
        try:
            self._sock.send_multipart([self.topic, self.seq.to_bytes(8, "big"), payload], flags=self._zmq.NOBLOCK)
        except self._zmq.Again:
            self.dropped += 1
        self.seq += 1

    def close(self) -> None:
        self._sock.close(0)
        self._ctx.term()
