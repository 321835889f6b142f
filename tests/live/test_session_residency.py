"""Residency by session, end to end on the simulated engine's KV events (issue 38, item 2): an app
that sends no session ids; the proxy's ids reach the engine, come back on `BlockStored.session_id`,
one per conversation; the core's residency by session holds exactly the blocks each conversation
stored that the engine still has (checked against a second, independent subscriber and the engine's
own pool), and a conversation whose blocks the engine evicted is judged not resident."""

from __future__ import annotations

import time

import httpx
import pytest

from proxy.harness.proxy_server import run_proxy_server
from proxy.harness.sim_server import run_sim_server
from proxy.runtime.kv_events import decode_batch

from .conftest import MODEL, agent_prompts, proxy_settings, sim_config

pytestmark = pytest.mark.sockets


def _chat(http: httpx.Client, url: str, system: str, turns: int, tag: str, headers: dict | None = None) -> None:
    msgs = [{"role": "system", "content": system}]
    for i in range(turns):
        msgs += [{"role": "user", "content": f"{tag} step {i}"}, {"role": "assistant", "content": "ok"}]
    msgs.append({"role": "user", "content": f"{tag} step {turns}"})
    r = http.post(
        url + "/v1/chat/completions", json={"model": MODEL, "messages": msgs, "max_tokens": 2}, headers=headers
    )
    assert r.status_code == 200, r.text


def _drain(sock, zmq) -> list:
    out = []
    while sock.poll(200):
        out += decode_batch(sock.recv_multipart(zmq.NOBLOCK)[-1])
    return out


def test_sessions_on_kv_events_and_exact_residency_by_session(http):
    zmq = pytest.importorskip("zmq")
    pytest.importorskip("msgpack")
    prompts = agent_prompts(3, 120)
    with run_sim_server(sim_config(kv_events_endpoint="tcp://127.0.0.1:*", capacity_blocks=90)) as sim:
        endpoint = sim.service.kv_publisher.endpoint
        ctx = zmq.Context()
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        sock.setsockopt_string(zmq.SUBSCRIBE, "")
        try:
            settings = proxy_settings(sim.url, kv_events_endpoint=endpoint, policy_enabled=True)
            with run_proxy_server(settings) as px:
                events: list = []
                deadline = time.monotonic() + 15
                i = 0
                while (px.live.kv_events.messages == 0 or not events) and time.monotonic() < deadline:
                    # ZMQ slow joiners: probe (with a client id, so never one of the proxy's) until both listen
                    _chat(http, px.url, f"probe {i} " * 40, 0, "probe", {"x-session-id": f"probe-{i}"})
                    events += _drain(sock, zmq)
                    i += 1
                assert events and px.live.kv_events.messages > 0
                for turns in range(3):
                    _chat(http, px.url, prompts["A"], turns, "alpha")
                    px.call(lambda: px.live.settle(5.0))
                for turns in range(2):
                    _chat(http, px.url, prompts["B"], turns, "beta")
                    px.call(lambda: px.live.settle(5.0))
                events += _drain(sock, zmq)
                time.sleep(0.3)
                px.call(lambda: None)  # the proxy's subscriber callbacks ran
                obs, res = px.live.observer, px.live.policy.residency
                bound = dict(obs.tags._by_key)  # conversation -> id
                stored_ids = {e.session_id for e in events if e.kind == "stored" and e.session_id}
                ours = {s for s in stored_ids if not s.startswith("probe-")}
                # one id per conversation: alpha's and beta's, the ids the proxy bound, nothing else
                assert len(bound) == 2 and ours == set(bound.values()), (bound, stored_ids)
                expected: dict[str, set] = {}
                owner: dict = {}
                for e in events:  # the independent replay of the stream (first store wins, like vLLM)
                    if e.kind == "stored" and e.session_id:
                        for h in e.block_hashes:
                            if h not in owner:
                                owner[h] = e.session_id
                                expected.setdefault(e.session_id, set()).add(h)
                    elif e.kind == "removed":
                        for h in e.block_hashes:
                            sid = owner.pop(h, None)
                            if sid is not None:
                                expected[sid].discard(h)
                pool = sim.service.engine.pool
                for key, tag in bound.items():
                    got = res.session_blocks(key)
                    assert got is not None and got == expected[tag] and got, (key, len(got or ()))
                    assert all(pool.contains(h) for h in got)  # resident in the engine itself
                # a third conversation fills the cache: alpha's blocks are evicted, and the planner's
                # verdict for alpha's context follows the engine, not the shadow's estimate
                alpha = next(k for k, s in px.live.policy.sessions.sessions.items() if k in bound and s.requests == 3)
                for turns in range(3):
                    _chat(http, px.url, prompts["C"] + " more" * 400, turns, "gamma")
                    px.call(lambda: px.live.settle(5.0))
                time.sleep(0.3)
                px.call(lambda: None)
                s = px.live.policy.sessions.sessions[alpha]
                _, gone = res.sessions.tokens(bound[alpha])
                blocks = res.session_blocks(alpha)
                assert gone > 0 and all(pool.contains(h) for h in blocks)
                verdict = res.session_verdict(alpha, s.hashes, s.block_tokens, (len(s.hashes), True, False))
                assert verdict[1] is False and verdict[0] < len(s.hashes)
        finally:
            sock.close(0)
            ctx.term()
