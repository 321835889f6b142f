"""PriorityFreeQueue (lazy heaps) picks the same victim as a full sort of the eviction key."""

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.cachemodel.block_pool import BlockPool
from proxy.cachemodel.free_queue import PriorityFreeQueue

OPS = st.lists(
    st.tuples(st.sampled_from(["push", "push", "remove", "pop"]), st.integers(-2, 6), st.floats(0, 3)),
    min_size=1,
    max_size=120,
)


@given(OPS, st.booleans())
@settings(max_examples=80, deadline=None)
def test_pop_matches_full_sort(ops, allow_negative):
    q = PriorityFreeQueue(retention_seconds=4.0)
    prio_of, now, nxt = {}, 0.0, 0
    for op, prio, dt in ops:
        now += dt
        if not allow_negative:
            prio = abs(prio)
        if op == "push":
            nxt += 1
            q.push(nxt, prio, now)
            prio_of[nxt] = prio
        elif op == "remove" and prio_of:
            key = sorted(prio_of)[prio % len(prio_of)]
            q.remove(key, prio_of.pop(key))
        elif op == "pop" and prio_of:
            expected = q.ordered(now)[0]
            assert q.pop_victim(now) == expected
            prio_of.pop(expected)
        assert len(q) == len(prio_of)


def test_many_priorities_priority_mode_pool_matches_sorted_order():
    p = BlockPool(6, eviction="priority", retention_seconds=10.0)
    for t, (ids, prio) in enumerate([([1, 2], 50), ([3], 7), ([4, 5], 99), ([6], 0)]):
        p.access(ids, float(t), priority=prio)
    assert p.eviction_order(3.0) == [6, 3, 2, 1, 5, 4]
    assert p.eviction_order(10.5) == [2, 1, 6, 3, 5, 4]  # 1,2 idle 10.5 s: decayed to 0, oldest first
    p.access([7, 8], 10.5)  # evicts 2 then 1
    assert not p.contains(1) and not p.contains(2) and p.contains(3)
