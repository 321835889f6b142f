"""vLLM-style KV events from the sim: in-process shape, and over ZMQ into the proxy's subscriber model."""

import time

import httpx
import pytest

from proxy.cachemodel.block_hash import chain_hashes
from proxy.cachemodel.cost_model import CostModel
from proxy.harness.sim_server import run_sim_server
from proxy.simengine.engine import EngineConfig, EngineRequest, SimEngine
from proxy.simengine.service import SimConfig

COST = CostModel(step_base_s=0.01, prefill_token_s=0.001, attn_token2_s=0.0, decode_seq_s=0.0)


def test_engine_records_stored_removed_cleared():
    e = SimEngine(EngineConfig(block_size=4, capacity_blocks=6, cost=COST))
    e.enable_kv_events()
    a = e.submit(EngineRequest(1, list(range(10, 22)), [7, 8, 9, 5, 6]), 0.0)  # 3 prompt blocks
    t = e.run_until_idle(0.0)
    ev = e.drain_kv_events()
    assert ev[0] == ("BlockStored", a.hashes, None, list(range(10, 22)), 4, None, "GPU", None)
    tail = ev[1]  # the generated block, stored at finish
    assert tail[0] == "BlockStored" and tail[2] == a.hashes[-1] and tail[3] == [7, 8, 9, 5]
    e.submit(EngineRequest(2, list(range(50, 66)), [1]), t)  # 4 new blocks: evicts 2 cached ones
    e.run_until_idle(t)
    kinds = [x[0] for x in e.drain_kv_events()]
    assert kinds[0] == "BlockRemoved" and "BlockStored" in kinds
    e.pool.reset()
    assert e.drain_kv_events() == [("AllBlocksCleared",)]


@pytest.mark.sockets
def test_zmq_stream_reproduces_residency():
    zmq = pytest.importorskip("zmq")
    pytest.importorskip("msgpack")
    from proxy.runtime.kv_events import KvResidency, decode_batch, token_chain_hashes

    cfg = SimConfig(speed=0, capacity_blocks=40, output_tokens=6, kv_events_endpoint="tcp://127.0.0.1:*")
    prompts = [[1000 * (i % 5) + k for k in range(100 + 10 * i)] for i in range(12)]
    with run_sim_server(cfg) as sim:
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.connect(sim.service.kv_publisher.endpoint)
        sub.setsockopt_string(zmq.SUBSCRIBE, "")
        time.sleep(0.3)  # ZMQ slow joiner
        res, seqs = KvResidency(), []
        with httpx.Client(base_url=sim.url, timeout=30) as c:
            for p in prompts:
                assert (
                    c.post("/v1/completions", json={"model": cfg.model, "prompt": p, "max_tokens": 3}).status_code
                    == 200
                )
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if not sub.poll(200):
                    break
                _topic, seq, payload = sub.recv_multipart()
                seqs.append(int.from_bytes(seq, "big"))
                for ev in decode_batch(payload):
                    res.apply(ev)
        pool = sim.service.engine.pool
        sub.close(0)
        ctx.term()
    assert seqs == list(range(len(seqs))) and seqs
    assert pool.stats().evictions > 0 and res.counts["removed"] == pool.stats().evictions
    assert len(res.resident) == pool.stats().cached
    for p in prompts:  # the subscriber's view equals ground truth
        assert res.resident_prefix_blocks(p, 16) == pool.match_prefix(chain_hashes(p, 16))
    assert len(token_chain_hashes(prompts[0], 16)) == 6
