"""vLLM KV-events: msgpack decoding, token-keyed residency, and a real ZMQ pub/sub round trip."""

import asyncio
import socket
import time

import msgpack
import pytest

from proxy.runtime.kv_events import KvEventSubscriber, KvResidency, decode_batch


def batch(*events):
    return msgpack.packb([1.0, list(events), 0])


def test_decode_and_residency_by_tokens():
    toks = list(range(100, 164))  # 4 blocks of 16
    evs = decode_batch(
        batch(
            ["BlockStored", [11, 12], None, toks[:32], 16, None, "GPU"],
            ["BlockStored", [13, 14], 12, toks[32:], 16, None, "GPU"],
        )
    )
    res = KvResidency()
    for e in evs:
        res.apply(e)
    assert res.resident_prefix_blocks(toks, 16) == 4
    for e in decode_batch(batch(["BlockRemoved", [13], "GPU"])):
        res.apply(e)
    assert res.resident_prefix_blocks(toks, 16) == 2
    for e in decode_batch(batch(["AllBlocksCleared"], ["Unknown", 1])):
        res.apply(e)
    assert res.resident_prefix_blocks(toks, 16) == 0 and res.counts["cleared"] == 1


async def test_zmq_round_trip():
    zmq = pytest.importorskip("zmq")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(f"tcp://127.0.0.1:{port}")
    seen = []
    sub = KvEventSubscriber(f"tcp://127.0.0.1:{port}", on_event=seen.append)
    try:
        assert await sub.start()
        payload = batch(["BlockStored", [1], None, list(range(16)), 16, None, "GPU"])
        for seq in range(50):  # slow-joiner: publish until the subscriber sees one
            pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])
            await asyncio.sleep(0.02)
            if seen:
                break
        assert seen and seen[0].kind == "stored"
        assert sub.info()["resident_blocks"] == 1
    finally:
        await sub.stop()
        pub.close(0)
        ctx.term()


def test_decode_vllm_032_tagged_maps():
    """vLLM 0.32 (msgspec `tag=True`, not array_like) sends each event as a map under "type"."""
    toks = list(range(200, 232))
    stored = {
        "type": "BlockStored",
        "block_hashes": [b"\x01" * 32, b"\x02" * 32],
        "parent_block_hash": None,
        "token_ids": toks,
        "block_size": 16,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
    }
    evs = decode_batch(
        batch(
            stored,
            {"type": "BlockRemoved", "block_hashes": [b"\x02" * 32], "medium": "GPU"},
            {"type": "AllBlocksCleared"},
            {"type": "Unknown"},
            {"no": "tag"},
        )
    )
    assert [e.kind for e in evs] == ["stored", "removed", "cleared"]
    assert evs[0].token_ids == tuple(toks) and evs[0].block_size == 16 and evs[0].medium == "GPU"
    res = KvResidency()
    res.apply(evs[0])
    assert res.resident_prefix_blocks(toks, 16) == 2


def test_sim_publisher_speaks_the_map_format():
    from proxy.simengine.kv_publisher import to_wire

    wire = to_wire(("BlockStored", [5, 6], 4, list(range(32)), 16, None, "GPU"))
    assert wire["type"] == "BlockStored" and wire["parent_block_hash"] == 4 and wire["lora_name"] is None
    assert [
        e.kind for e in decode_batch(batch(wire, to_wire(("BlockRemoved", [6], "GPU")), to_wire(("AllBlocksCleared",))))
    ] == ["stored", "removed", "cleared"]


def test_live_proxy_subscribes_to_the_engines_kv_events(http):
    """`kv_events_endpoint` set: the proxy starts, its subscriber decodes the sim's events, and an
    engine-side cache reset (AllBlocksCleared) clears the residency shadow."""
    pytest.importorskip("zmq")
    from proxy.harness.proxy_server import run_proxy_server
    from proxy.harness.sim_server import run_sim_server

    from .conftest import agent_prompts, proxy_settings, sim_config

    prompts = agent_prompts(2, 120)
    with run_sim_server(sim_config(kv_events_endpoint="tcp://127.0.0.1:*")) as sim:
        endpoint = sim.service.kv_publisher.endpoint
        with run_proxy_server(proxy_settings(sim.url, kv_events_endpoint=endpoint)) as px:
            sub = px.live.kv_events
            assert sub is not None
            deadline = time.monotonic() + 10
            i = 0
            while sub.messages == 0 and time.monotonic() < deadline:  # ZMQ slow joiner: keep sending
                body = {
                    "model": "sim-llama-3.1-8b",
                    "max_tokens": 2,
                    "messages": [
                        {"role": "system", "content": prompts["AB"[i % 2]]},
                        {"role": "user", "content": f"q {i}"},
                    ],
                }
                assert http.post(px.url + "/v1/chat/completions", json=body).status_code == 200
                i += 1
                time.sleep(0.1)
            assert sub.messages > 0 and sub.residency.counts["stored"] > 0
            assert px.live.policy.residency.used_tokens > 0
            assert http.post(sim.url + "/reset_prefix_cache").status_code == 200
            while sub.residency.counts["cleared"] == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sub.residency.counts["cleared"] == 1
            px.call(lambda: None)  # let the loop run the callback
            assert px.live.policy.residency.used_tokens == 0


def test_block_stored_session_id_is_read_from_the_map_form():
    """vLLM's `BlockStored.session_id` (PR #51381; absent when the request had none, omit_defaults)."""
    msgpack = pytest.importorskip("msgpack")
    from proxy.runtime.kv_events import decode_batch
    from proxy.simengine.kv_publisher import to_wire

    with_sid = to_wire(("BlockStored", [5], None, list(range(16)), 16, None, "GPU", "cs-abc"))
    without = to_wire(("BlockStored", [6], 5, list(range(16)), 16, None, "GPU", None))
    assert with_sid["session_id"] == "cs-abc" and "session_id" not in without
    arr = ["BlockStored", [7], None, list(range(16)), 16, None, "GPU", "lora-name-not-a-session"]
    evs = decode_batch(msgpack.packb([0.0, [with_sid, without, arr], 0], use_bin_type=True))
    assert [e.session_id for e in evs] == ["cs-abc", None, None]
