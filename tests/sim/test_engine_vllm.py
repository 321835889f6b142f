"""SimEngine against vLLM v1's scheduler rules (docs/sim-engine.md, "Scheduler"), one test per rule,
plus vLLM's and SGLang's priority scheduling and the decode fast-forward."""

import random

import pytest

from proxy.cachemodel.cost_model import CostModel
from proxy.simengine.engine import EngineConfig, EngineRequest, SimEngine

COST = CostModel(step_base_s=0.01, prefill_token_s=0.001, attn_token2_s=0.0, decode_seq_s=0.0)


def req(i, prompt, out=3, prio=0):
    return EngineRequest(i, list(prompt), list(range(1000 + 10 * i, 1000 + 10 * i + out)), priority=prio)


def eng(**kw):
    kw.setdefault("block_size", 4)
    kw.setdefault("cost", COST)
    return SimEngine(EngineConfig(**kw))


def step_until(e, now, cond, limit=500):
    for _ in range(limit):
        if cond():
            return now
        res = e.step(now)
        assert res is not None
        now = res.end
    raise AssertionError("condition never met")


# rule 1: a waiting request holds no blocks; its hit is looked up when it is scheduled, and then
# sees blocks a running request has filled while decoding (vLLM caches full blocks as they fill)
def test_waiting_holds_nothing_and_hit_is_decided_at_scheduling():
    e = eng(capacity_blocks=64, max_num_seqs=1)
    a = e.submit(EngineRequest(1, list(range(100, 116)), [7, 8, 9, 10, 11, 12, 13, 14, 15, 16]), 0.0)
    b_prompt = list(range(100, 116)) + [7, 8, 9, 10, 11, 12, 13, 14] + [1, 2, 3, 4]
    b = e.submit(EngineRequest(2, b_prompt, [5]), 0.0)
    now = step_until(e, 0.0, lambda: a.generated >= 9)
    assert b in e.waiting and e.pool.held_blocks(b.req_id) == 0 and b.admitted_at is None
    assert e.pool.match_prefix(b.hashes) == 6  # a's generated blocks are already cached, a still runs
    e.run_until_idle(now)
    assert b.admitted_at >= a.finished_at and b.cached_tokens == 24  # 6 blocks: cap (28 - 1) // 4 = 6


# rule 2: admitted when the blocks for the tokens it computes this step fit (not its whole output);
# FCFS head-of-line: a request that does not fit blocks the smaller one behind it
def test_admission_needs_only_this_steps_blocks_and_blocks_the_queue():
    e = eng(capacity_blocks=6)
    a = e.submit(req(1, range(16), out=4), 0.0)  # prefill: 4 blocks (its output would need a 5th)
    b = e.submit(req(2, range(50, 54), out=5), 0.0)  # prefill: 1 block -> 5 of 6 blocks: fits now
    r = e.step(0.0)
    assert r.admitted == (a, b) and e.pool.stats().held == 5
    e2 = eng(capacity_blocks=6)
    e2.submit(req(1, range(16), out=2), 0.0)
    big = e2.submit(req(2, range(50, 62), out=1), 0.0)  # 3 blocks, 2 free: waits
    small = e2.submit(req(3, range(70, 74), out=1), 0.0)  # 1 block would fit, but queues behind
    r = e2.step(0.0)
    assert len(r.admitted) == 1 and list(e2.waiting) == [big, small]


def test_full_isl_gate_waits_for_the_whole_prompt_unless_disabled():
    """vLLM `scheduler_reserve_full_isl` (default on): the first chunk fitting is not enough."""
    for reserve, admitted in ((True, False), (False, True)):
        e = eng(capacity_blocks=6, max_num_batched_tokens=4, reserve_full_isl=reserve)
        a = e.submit(req(1, range(16), out=3), 0.0)  # 4 blocks, one chunk per step
        now = step_until(e, 0.0, lambda a=a: not a.prefilling)
        b = e.submit(req(2, range(50, 62), out=1), now)  # chunk of 3 tokens: 1 block; whole: 3 blocks
        res = e.step(now)
        assert (b in res.admitted) is admitted


# rule 3: running requests hold their blocks; decode blocks are allocated as decode proceeds
def test_decode_blocks_grow_block_by_block():
    e = eng(capacity_blocks=64)
    a = e.submit(req(1, range(16), out=9), 0.0)
    held = []
    now = 0.0
    while not a.done:
        now = e.step(now).end
        if not a.done:
            held.append(e.pool.held_blocks(a.req_id))
    assert held[0] == 4  # prompt blocks only after the prefill step
    assert held == sorted(held) and held[-1] == 6  # one more block every 4 tokens: 16 + 8 computed
    assert e.pool.stats().held == 0 and e.pool.stats().cached == 6


# rule 4: preemption by recompute, vLLM's victim rules
def test_fcfs_preempts_the_last_running_request_which_resumes_from_its_cached_blocks():
    e = eng(capacity_blocks=6)
    a = e.submit(req(1, range(8), out=8), 0.0)  # 2 blocks, grows to 4
    b = e.submit(req(2, range(50, 58), out=8), 0.0)  # 2 blocks, grows to 4: 8 > 6
    first = e.step(0.0)
    assert first.admitted == (a, b)
    now = step_until(e, first.end, lambda: e.num_preemptions > 0)
    assert b in e.waiting and b.computed == 0 and b.num_preemptions == 1 and a in e.running
    assert e.pool.held_blocks(b.req_id) == 0 and e.pool.match_prefix(b.hashes) == 2  # freed, still cached
    e.run_until_idle(now)
    assert a.done and b.done and b.generated == 8 and b.cached_tokens == 0  # usage keeps the first lookup
    assert b.finished_at > a.finished_at and e.pool.stats().held == 0


def test_priority_policy_preempts_the_lowest_priority_and_orders_the_heap():
    e = eng(capacity_blocks=6, scheduling_policy="priority")
    low = e.submit(req(1, range(8), out=8, prio=5), 0.0)
    high = e.submit(req(2, range(50, 58), out=8, prio=0), 0.0)  # arrives later, runs first
    first = e.step(0.0)
    assert first.admitted == (high, low)  # heap on (priority, arrival)
    step_until(e, first.end, lambda: e.num_preemptions > 0)
    assert low.num_preemptions == 1 and high.num_preemptions == 0  # the last in `running` is high...
    # ...but under the priority policy the victim is max(priority, arrival)
    e2 = eng(capacity_blocks=64, max_num_seqs=1, scheduling_policy="priority")
    order = [
        e2.submit(req(i, range(100 * i, 100 * i + 8), out=1, prio=p), float(i)) for i, p in enumerate([5, 0, 3, 0])
    ]
    admitted = []
    now = 4.0
    while e2.has_work:
        res = e2.step(now)
        admitted += res.admitted
        now = res.end
    assert admitted == [order[1], order[3], order[2], order[0]]  # (0, 1.0), (0, 3.0), (3, 2.0), (5, 0.0)


def test_fcfs_refuses_a_non_zero_priority_unless_told_to_ignore():
    with pytest.raises(ValueError, match=r"^Got priority 3 but Priority scheduling is not enabled\.$"):
        eng(capacity_blocks=64).submit(req(1, range(8), prio=3), 0.0)
    assert eng(capacity_blocks=64, fcfs_priority="ignore").submit(req(1, range(8), prio=3), 0.0)
    assert eng(capacity_blocks=64, eviction="priority").submit(req(1, range(8), prio=3), 0.0)  # SGLang-shaped


# rule 5: one token budget per step, running requests first; long_prefill_token_threshold
def test_budget_is_shared_and_long_prefill_threshold_caps_a_chunk():
    e = eng(capacity_blocks=256, max_num_batched_tokens=10, long_prefill_token_threshold=4)
    a = e.submit(req(1, range(100, 112), out=2), 0.0)  # 12 tokens: chunks of 4
    b = e.submit(req(2, range(200, 203), out=2), 0.0)
    r0 = e.step(0.0)
    assert r0.prefill_tokens == 7 and r0.admitted == (a, b) and b in r0.emitted  # 4 (cap) + 3
    r1 = e.step(r0.end)
    assert (r1.prefill_tokens, r1.decode_rows) == (4, 1)  # a's next chunk, b's decode
    assert a.computed == 8


# SGLang --enable-priority-scheduling: larger value first; preempt only when the gap > threshold
@pytest.mark.parametrize("gap, preempts", [(10, False), (11, True)])
def test_sglang_preempts_only_above_the_threshold(gap, preempts):
    e = eng(capacity_blocks=6, scheduling_policy="sglang", eviction="priority")
    low = e.submit(req(1, range(16), out=6, prio=0), 0.0)  # holds 4-5 blocks while decoding
    now = e.step(0.0).end
    high = e.submit(req(2, range(50, 62), out=1, prio=gap), now)  # needs 3 blocks
    res = e.step(now)
    assert (high in res.admitted) is preempts and (low.num_preemptions == 1) is preempts
    e.run_until_idle(res.end)
    assert low.done and high.done


def test_sglang_queue_runs_larger_priorities_first_unless_told_otherwise():
    for low_first, expect in ((False, [2, 1, 0]), (True, [0, 1, 2])):
        e = eng(capacity_blocks=64, max_num_seqs=1, scheduling_policy="sglang", low_priority_values_first=low_first)
        blocker = e.submit(req(9, range(900, 904), out=1), 0.0)
        e.step(0.0)
        rs = [e.submit(req(i, range(100 * i, 100 * i + 4), out=1, prio=i), 0.0) for i in range(3)]
        admitted = []
        now = 1.0
        while e.has_work:
            res = e.step(now)
            admitted += res.admitted
            now = res.end
        assert blocker.done and [rs.index(r) for r in admitted] == expect


# speed: fast_forward gives exactly what step() gives
def drive(fast: bool, seed: int = 3, max_num_seqs: int = 256):
    rng = random.Random(seed)
    e = SimEngine(
        EngineConfig(
            block_size=4, capacity_blocks=30, max_num_batched_tokens=64, max_num_seqs=max_num_seqs, cost=CostModel()
        )
    )
    arrivals = []
    t = 0.0
    for i in range(60):
        t += rng.expovariate(20.0)
        base = rng.randrange(4) * 1000
        prompt = list(range(base, base + rng.randint(4, 40)))
        arrivals.append((t, EngineRequest(i, prompt, list(range(5, 5 + rng.randint(1, 40))))))
    now, i, steps = 0.0, 0, 0
    while i < len(arrivals) or e.has_work:
        while i < len(arrivals) and arrivals[i][0] <= now:
            e.submit(arrivals[i][1], arrivals[i][0])
            i += 1
        if not e.has_work:
            now = arrivals[i][0]
            continue
        horizon = arrivals[i][0] if i < len(arrivals) else float("inf")
        res = e.fast_forward(now, horizon) if fast else None
        res = res or e.step(now)
        steps += res.steps
        now = res.end
    reqs = [r for _, r in arrivals]
    return [(r.first_token_at, r.finished_at, r.cached_tokens, r.num_preemptions) for r in reqs], steps, e


@pytest.mark.parametrize("max_num_seqs", [256, 3])
def test_fast_forward_is_identical_to_stepping(max_num_seqs):
    slow, slow_steps, e1 = drive(False, max_num_seqs=max_num_seqs)
    fast, fast_steps, e2 = drive(True, max_num_seqs=max_num_seqs)
    assert slow == fast and slow_steps == fast_steps == e1.steps == e2.steps
    assert e1.pool.stats() == e2.pool.stats() and e1.pool.eviction_order() == e2.pool.eviction_order()
    assert e1.num_preemptions > 0  # the workload exercises preemption too


def test_fast_forward_declines_when_the_next_step_is_not_plain_decode():
    e = eng(capacity_blocks=64)
    a = e.submit(req(1, range(8), out=20), 0.0)
    assert e.fast_forward(0.0) is None  # prefill pending
    now = e.step(0.0).end
    res = e.fast_forward(now, horizon=now + 0.035)  # 4 steps of 10 ms start before the horizon
    assert res is not None and res.steps == 4 and a.generated == 5 and res.end == pytest.approx(now + 0.04)
    e.submit(req(2, range(50, 54), out=1), res.end)
    assert e.fast_forward(res.end) is None  # a waiting request: step() must schedule it


def test_running_requests_are_served_in_list_order_from_one_budget():
    """A request whose host-tier load lands sits before a request admitted after it: vLLM gives
    it its prefill chunk first, and a later decode waits when that chunk takes the whole budget."""
    e = eng(capacity_blocks=64, cpu_blocks=64, max_num_batched_tokens=8)
    prompt = list(range(100, 124))  # 6 blocks
    e.submit(req(1, prompt, out=1), 0.0)
    now = e.run_until_idle(0.0)
    assert e.pool.reset()  # GPU cache gone, host tier keeps the 6 blocks (write-through)
    a = e.submit(req(2, prompt + list(range(500, 520)), out=2), now)  # 6 blocks load, 20 tokens to prefill
    b = e.submit(req(3, [7, 8], out=50), now)
    r0 = e.step(now)
    assert r0.admitted == (a, b) and a.ready_at > now and b in r0.emitted  # a loads, b prefills
    t = r0.end
    while a.ready_at > t:  # b decodes alone while a's KV loads
        t = e.step(t).end
    before = b.generated
    r = e.step(t)
    assert r.prefill_tokens == 8 and r.decode_rows == 0 and b.generated == before  # a's chunk took it all


def test_sglang_priority_eviction_never_decays_with_infinite_retention():
    """SGLang's radix priority (max over inserts) never decays: `retention_seconds=inf` models it;
    the default 300 s decay lets an idle high-priority block fall back to 0."""
    for retention, high_survives in ((float("inf"), True), (300.0, False)):
        e = eng(capacity_blocks=4, eviction="priority", retention_seconds=retention, fcfs_priority="ignore")
        high = e.submit(req(1, range(8), out=1, prio=50), 0.0)  # 2 blocks, kept at priority 50
        e.run_until_idle(0.0)
        e.submit(req(2, range(50, 58), out=1, prio=0), 1000.0)
        t = e.run_until_idle(1000.0)
        e.submit(req(3, range(70, 78), out=1, prio=0), t)  # needs 2 of the 4 blocks
        e.run_until_idle(t)
        assert (e.pool.match_prefix(high.hashes) == 2) is high_survives
