"""The replay runs on the simulated engine: the same request sequence gives the same hits and TTFTs
through the replay as through `SimEngine`'s own loop, and pinned Belady bounds every eviction-only
policy on that engine."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.cachemodel.block_hash import chain_hashes
from proxy.cachemodel.cost_model import CostModel
from proxy.replay.runner import ReplaySettings, make_policy, run_policy
from proxy.replay.traces import ReplayRequest
from proxy.simengine.engine import EngineConfig, EngineRequest, SimEngine

COST = CostModel()
BS = 16


def _sessions(seed: int, n_sessions: int, turns: int, capacity_share: float = 1.0):
    """Token-level sessions: a shared system prompt per agent, an append-only history per session,
    outputs of 1..60 tokens; arrivals close enough to queue."""
    rng = random.Random(seed)
    agents = [[rng.randrange(1, 50_000) for _ in range(rng.randint(40, 120))] for _ in range(3)]
    out = []
    for s in range(n_sessions):
        t = rng.uniform(0, 2.0)
        hist = [rng.randrange(1, 50_000) for _ in range(rng.randint(5, 60))]
        for _ in range(turns):
            agent = rng.randrange(len(agents))
            prompt = agents[agent] + hist
            out_n = rng.randint(1, 60)
            out.append((t, prompt, out_n, f"s{s}"))
            hist = hist + [rng.randrange(1, 50_000) for _ in range(rng.randint(3, 40))]
            t += rng.choice([0.01, 0.05, 0.3, 1.0])
    out.sort(key=lambda x: x[0])
    return out


def _as_replay(stream):
    reqs = []
    for t, prompt, out_n, sid in stream:
        full = chain_hashes(prompt, BS)
        rest = len(prompt) - len(full) * BS
        hashes = tuple(full) + ((hash(("partial", sid, len(prompt))),) if rest else ())
        tokens = (BS,) * len(full) + ((rest,) if rest else ())
        reqs.append(
            ReplayRequest(t=t, tenant="", block_hashes=hashes, block_tokens=tokens, output_tokens=out_n, session_id=sid)
        )
    return reqs


def _engine_loop(stream, capacity):
    """SimEngine's own loop, as the sim server drives it: submit on arrival, step, repeat."""
    eng = SimEngine(EngineConfig(block_size=BS, capacity_blocks=capacity, cost=COST))
    reqs = []
    i, now = 0, stream[0][0]
    while i < len(stream) or eng.has_work:
        while i < len(stream) and stream[i][0] <= now:
            t, prompt, out_n, _ = stream[i]
            reqs.append(eng.submit(EngineRequest(i, list(prompt), [7] * out_n), t))
            i += 1
        if not eng.has_work:
            now = stream[i][0]
            continue
        now = eng.step(now).end
    hits = [(r.cached_tokens // BS) for r in reqs]
    ttft = [r.first_token_at - r.arrival for r in reqs]
    turn = [r.finished_at - r.arrival for r in reqs]
    return hits, ttft, turn, eng.steps


@pytest.mark.parametrize("capacity", [40, 120, 2000])
def test_replay_and_the_engines_own_loop_give_identical_hits_and_ttfts(capacity):
    stream = _sessions(1, n_sessions=8, turns=6)
    hits, ttft, turn, steps = _engine_loop(stream, capacity)
    rec = run_policy(make_policy("lru", ReplaySettings()), _as_replay(stream), capacity, COST)
    assert list(rec.hit_blocks) == hits
    assert rec.ttft.tolist() == ttft  # bit-identical: decode-only stretches are skipped exactly
    assert rec.turn.tolist() == turn
    assert rec.engine_steps == steps and rec.skipped_steps > 0
    assert sum(hits) > 0


def _random_stream(seed: int, n: int, blocks: int):
    """Block-level random workload: prefixes of a few chains, random arrivals and outputs."""
    rng = random.Random(seed)
    chains = [[(c << 20) + j + 1 for j in range(blocks)] for c in range(4)]
    out, t = [], 0.0
    for _ in range(n):
        t += rng.choice([0.0, 0.002, 0.02, 0.2, 1.0])
        c = rng.randrange(len(chains))
        k = rng.randint(1, blocks)
        hashes = tuple(chains[c][:k])
        out.append(
            ReplayRequest(
                t=t,
                tenant="",
                block_hashes=hashes,
                block_tokens=(BS,) * k,
                output_tokens=rng.randint(1, 40),
                session_id=f"s{c}",
                category=f"c{c % 2}",
                finish_reason=rng.choice(["stop", "tool_calls"]),
            )
        )
    return out


def _hits(name, reqs, cap):
    return int(run_policy(make_policy(name, ReplaySettings()), reqs, cap, COST).hit_blocks.sum())


# derandomize: the same 40 examples in every run. Pinned Belady is an empirical bound on the engine,
# not a proven one: an eviction changes the next prefill's length, so the timing of admissions and
# frees, so which blocks are free at the next eviction. Over 300 random workloads of this shape on the
# merged engine one counterexample was found (seed 8383, n 28, blocks 4, slack 16: history 25 hit
# blocks vs Belady's 24); docs/replay.md reports it.
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(seed=st.integers(0, 10_000), n=st.integers(5, 40), blocks=st.integers(2, 12), slack=st.integers(0, 20))
def test_pinned_belady_beats_every_eviction_only_policy(seed, n, blocks, slack):
    reqs = _random_stream(seed, n, blocks)
    cap = blocks + 3 + slack  # every request fits (prompt + output KV) with room to spare or not
    bel = _hits("belady", reqs, cap)
    for name in ("lru", "history", "ttl", "scout-engine"):
        assert _hits(name, reqs, cap) <= bel, name


def _blk(t, hashes, **kw):
    return ReplayRequest(
        t=t, tenant="", block_hashes=tuple(hashes), block_tokens=(BS,) * len(hashes), output_tokens=4, **kw
    )


def test_oracle_keeper_rewarms_a_paused_sessions_context_just_in_time_and_only_what_was_seen():
    ctx = list(range(1, 11))
    reqs = [_blk(0.0, ctx, session_id="s", finish_reason="tool_calls")]
    reqs += [_blk(1.0 + 0.2 * k, [1000 + 20 * k + j for j in range(12)]) for k in range(10)]  # evicts ctx
    reqs.append(_blk(5.0, [*ctx, 11, 12], session_id="s"))
    lru = run_policy(make_policy("lru", ReplaySettings()), reqs, 16, COST)
    pol = make_policy("oracle-keeper", ReplaySettings())
    rec = run_policy(pol, reqs, 16, COST)
    assert lru.hit_blocks[-1] == 0
    assert rec.hit_blocks[-1] == 10  # the whole seen context, warmed before the resume arrived
    assert pol.extra()["sent"] >= 1
    assert rec.signals["oracle"].acted_tokens == 10 * BS  # only the 10 blocks seen before, not 11, 12
    assert rec.ttft[-1] < lru.ttft[-1]
