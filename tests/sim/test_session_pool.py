"""SGLang's session radix cache in the block pool and the simulated engine (docs/sglang-sessions.md)."""

from __future__ import annotations

import pytest

from proxy.cachemodel.session_pool import SessionPool
from proxy.simengine.engine import EngineConfig, EngineRequest, SimEngine


def _finish(pool: SessionPool, rid: str, chain: list, now: float, sid: str | None = None, prio: int = 0) -> int:
    """One request: allocate, free, and (with a session) tag its chain as SGLang does at finish."""
    gen = pool.ensure_session(sid) if sid is not None else 0
    hit = pool.allocate(rid, chain, now, prio)
    assert hit is not None
    pool.free(rid, now)
    if sid is not None:
        pool.register(sid, gen, chain)
    return hit


def test_unreferenced_blocks_go_before_a_live_sessions_even_when_older():
    pool = SessionPool(6)
    _finish(pool, "a", ["s1", "s2", "s3"], 1.0, sid="S")  # oldest, but a live session holds it
    _finish(pool, "b", ["x1", "x2", "x3"], 2.0)  # newer, no session
    _finish(pool, "c", ["y1", "y2", "y3"], 3.0)  # needs 3 slots: must take x*, not s*
    assert pool.match_prefix(["s1", "s2", "s3"]) == 3
    assert pool.match_prefix(["x1"]) == 0
    assert pool.refs("s1") == 1 and pool.refs("y1") == 0


def test_plain_lru_evicts_the_oldest_without_sessions():
    pool = SessionPool(6)
    _finish(pool, "a", ["s1", "s2", "s3"], 1.0)
    _finish(pool, "b", ["x1", "x2", "x3"], 2.0)
    _finish(pool, "c", ["y1", "y2", "y3"], 3.0)
    assert pool.match_prefix(["s1"]) == 0 and pool.match_prefix(["x1", "x2", "x3"]) == 3


def test_when_everything_is_referenced_the_fewest_holders_go_first_then_lru():
    """Soft protection (SGLang's key (refs>0, refs, base)): referenced KV is still evicted."""
    pool = SessionPool(6)
    _finish(pool, "a", ["p", "a1"], 1.0, sid="A")
    _finish(pool, "b", ["p", "b1"], 2.0, sid="B")  # p is held by A and B
    _finish(pool, "c", ["c1", "c2"], 3.0, sid="C")
    assert pool.refs("p") == 2
    # free: p(2 refs), a1, b1, c1, c2 (1 ref each); 1 empty slot. Ask for 3 new blocks.
    _finish(pool, "d", ["d1", "d2", "d3"], 4.0)
    assert pool.contains("p")  # two holders: last
    assert not pool.contains("a1") and not pool.contains("b1")  # one holder, oldest first
    assert pool.contains("c1") and pool.contains("c2")


def test_held_blocks_are_never_evicted():
    pool = SessionPool(3)
    assert pool.allocate("run", ["r1", "r2"], 1.0) == 0
    _finish(pool, "a", ["s1"], 2.0, sid="S")
    assert pool.allocate("new", ["n1", "n2"], 3.0) is None  # only s1 is free
    assert pool.allocate("new", ["n1"], 3.0) == 0  # takes s1 (referenced, but the only one)
    assert pool.contains("r1") and not pool.contains("s1")
    assert pool.session_blocks("S") == 0  # the evicted block left the session's coverage


def test_a_new_turn_advances_the_leaf_and_a_branch_adds_one():
    pool = SessionPool(20)
    _finish(pool, "t1", ["p", "q"], 1.0, sid="S")
    _finish(pool, "t2", ["p", "q", "r"], 2.0, sid="S")
    assert pool.session_blocks("S") == 3 and pool.refs("p") == 1  # counted once per session
    _finish(pool, "t3", ["p", "z"], 3.0, sid="S")  # a branch: both leaves kept
    assert pool.session_blocks("S") == 4 and pool.refs("r") == 1 and pool.refs("z") == 1


def test_close_dereferences_but_keeps_the_kv():
    pool = SessionPool(6)
    _finish(pool, "a", ["s1", "s2", "s3"], 1.0, sid="S")
    _finish(pool, "b", ["x1", "x2", "x3"], 2.0)
    assert pool.close_session("S") is True
    assert pool.close_session("S") is False  # already closed
    assert pool.match_prefix(["s1", "s2", "s3"]) == 3  # still cached after close ("deref")
    _finish(pool, "c", ["y1", "y2", "y3"], 3.0)  # now the oldest (s*) goes, as in LRU
    assert pool.match_prefix(["s1"]) == 0 and pool.match_prefix(["x1", "x2", "x3"]) == 3


def test_close_keeps_blocks_another_live_session_holds():
    pool = SessionPool(8, close_mode="free")
    _finish(pool, "a", ["p", "a1"], 1.0, sid="A")
    _finish(pool, "b", ["p", "b1"], 2.0, sid="B")
    assert pool.close_session("A")
    assert pool.contains("p") and not pool.contains("a1")  # reclaimed: only A held it
    assert pool.refs("p") == 1 and pool.session_freed == 1
    assert pool.stats().used == 2 and pool.stats().cached == 2  # p, b1 stay; a1's slot is empty again


def test_a_request_admitted_before_close_does_not_tag_and_the_id_reopens():
    pool = SessionPool(10)
    gen = pool.ensure_session("S")
    assert pool.allocate("r", ["a", "b"], 1.0) == 0
    pool.close_session("S")
    pool.free("r", 2.0)
    assert pool.register("S", gen, ["a", "b"]) is False  # stale generation
    assert pool.refs("a") == 0
    assert pool.ensure_session("S") != gen  # a new incarnation


def test_priority_base_order_within_the_unreferenced_tier():
    pool = SessionPool(4, eviction="priority")
    _finish(pool, "hi", ["h1", "h2"], 1.0, prio=5)
    _finish(pool, "lo", ["l1", "l2"], 2.0, prio=0)
    _finish(pool, "n", ["n1", "n2"], 3.0)
    assert pool.contains("h1") and pool.contains("h2") and not pool.contains("l1")


def test_reset_clears_tags():
    pool = SessionPool(4)
    _finish(pool, "a", ["s1"], 1.0, sid="S")
    assert pool.reset()
    assert pool.refs("s1") == 0 and pool.session_blocks("S") == 0


def test_bad_close_mode():
    with pytest.raises(ValueError):
        SessionPool(4, close_mode="pin")


def _run(eng: SimEngine, rid: int, prompt: range, sid: str | None, now: float) -> tuple[EngineRequest, float]:
    r = eng.submit(EngineRequest(rid, prompt, range(2), radix_session=sid), now)
    end = eng.run_until_idle(now)
    return r, end


def _session_then_pressure(flag: bool) -> tuple[SimEngine, EngineRequest]:
    eng = SimEngine(EngineConfig(block_size=4, capacity_blocks=12, session_radix_cache=flag))
    _, t = _run(eng, 1, range(16), "S", 0.0)
    _, t = _run(eng, 2, range(100, 132), None, t + 1)  # newer, unreferenced
    _, t = _run(eng, 3, range(200, 216), None, t + 1)  # pressure: someone's blocks must go
    r4, _ = _run(eng, 4, range(16), "S", t + 1)
    return eng, r4


def test_engine_flag_tags_finished_requests_and_closes():
    eng, r4 = _session_then_pressure(True)
    pool = eng.sessions
    assert pool is not None and pool.session_blocks("S") == 4  # the prompt's full blocks
    assert r4.cached_tokens == 12  # the whole hittable prompt (the last token is recomputed)
    _, lru = _session_then_pressure(False)
    assert lru.cached_tokens < 12  # stock LRU evicted the older session's prompt
    assert eng.close_session("S") and not eng.close_session("S")


def test_engine_without_the_flag_has_no_sessions():
    eng = SimEngine(EngineConfig(block_size=4, capacity_blocks=12))
    assert eng.sessions is None and not eng.close_session("S") and not eng.open_session("S")
    _run(eng, 1, range(16), "S", 0.0)  # a session id is ignored


def test_an_evicted_tail_moves_the_leaf_up_and_a_middle_block_cuts_the_chain():
    pool = SessionPool(4)
    _finish(pool, "a", ["p", "q", "r"], 1.0, sid="S")
    assert pool.allocate("x", ["x1", "x2"], 2.0) == 0  # 1 empty + 1 eviction: the referenced tail r
    assert not pool.contains("r") and pool.session_blocks("S") == 2 and pool.refs("q") == 1
    pool.free("x", 2.0)
    _finish(pool, "b", ["p", "z"], 3.0, sid="S")  # a branch from p: leaves q and z
    assert pool.session_blocks("S") == 3
    pool._drop_coverage("p")  # as if p went: both leaves are cut at it
    assert pool.session_blocks("S") == 0 and pool.refs("q") == 0 and pool.refs("z") == 0
