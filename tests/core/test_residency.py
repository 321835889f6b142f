"""Residency shadow: LRU with deepest-first eviction, strides, near-eviction, engine truth."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import view_from_blocks
from proxy.core.residency import ResidencyShadow


def fwd(r, ids, tok=16, anchor=0):
    return r.on_forward(view_from_blocks("", ids, tok, anchor_blocks=anchor), 0.0)


def test_lru_evicts_deepest_blocks_of_the_oldest_prompt_first():
    r = ResidencyShadow(capacity_tokens=16 * 6)
    fwd(r, [1, 2, 3, 4])
    fwd(r, [10, 11])
    assert r.resident_prefix([1, 2, 3, 4]) == 4
    fwd(r, [20, 21])  # 8 blocks > 6: two go, the old prompt's tail first
    assert r.resident_prefix([1, 2, 3, 4]) == 2
    assert 4 not in r and 3 not in r and 1 in r
    assert r.used_tokens == 16 * 6


def test_hit_estimate_is_the_resident_prefix_before_the_request():
    r = ResidencyShadow(capacity_tokens=10_000)
    assert fwd(r, [1, 2, 3]) == 0
    assert fwd(r, [1, 2, 3, 4, 5]) == 48
    assert fwd(r, [1, 2, 9]) == 32


def test_touch_refreshes_recency():
    r = ResidencyShadow(capacity_tokens=16 * 4)
    fwd(r, [1, 2])
    fwd(r, [3, 4])
    r.touch([1, 2], [16, 16])  # a Touch action: 1,2 become most recent
    fwd(r, [5, 6])
    assert r.resident_prefix([1, 2]) == 2 and r.resident_prefix([3, 4]) == 0


def test_near_eviction_flags_the_lru_tail_only_when_the_cache_is_full():
    r = ResidencyShadow(capacity_tokens=16 * 100, near_eviction_fraction=0.25)
    fwd(r, list(range(1, 11)))  # anchor-like prompt, oldest
    assert not r.near_eviction(list(range(1, 11)))  # cache mostly empty
    fwd(r, list(range(100, 180)))  # 90 of 100 blocks used
    assert r.near_eviction(list(range(1, 11)))
    assert not r.near_eviction(list(range(100, 180))[:10])
    fwd(r, list(range(1, 11)))  # used again: safe
    assert not r.near_eviction(list(range(1, 11)))
    assert not ResidencyShadow(0).near_eviction([1, 2])  # unknown capacity: never


def test_engine_truth_corrections():
    r = ResidencyShadow(capacity_tokens=0)
    fwd(r, list(range(1, 101)))
    assert len(r) == 100  # unknown capacity: nothing evicted
    r.on_engine_truth(capacity_blocks=50, block_tokens=16)
    assert r.capacity_tokens == 800 and r.used_tokens <= 800
    assert r.resident_prefix(list(range(1, 101))) == 50
    r.on_engine_truth(removed=[10])
    assert r.resident_prefix(list(range(1, 101))) == 9
    r.on_engine_truth(stored=[500, 501], stored_tokens=16)
    assert 500 in r and 501 in r
    r.on_engine_truth(cleared=True)
    assert len(r) == 0 and r.used_tokens == 0
    epoch = r.epoch
    r.on_engine_truth(usage_ratio=0.5)
    assert r.usage_ratio == 0.5 and r.epoch == epoch + 1


def test_auto_stride_tracks_fewer_entries_with_the_same_prefix_answers():
    exact = ResidencyShadow(capacity_tokens=16 * 400, stride=1)
    coarse = ResidencyShadow(capacity_tokens=16 * 400, stride=0)
    ids = list(range(1, 209))  # 13 strides of 16 blocks
    fwd(exact, ids, anchor=13)
    fwd(coarse, ids, anchor=13)
    assert coarse.stride == 16 and len(coarse) <= len(exact) // 14
    assert coarse.used_tokens == exact.used_tokens == 16 * 208
    for r in (exact, coarse):
        assert r.resident_prefix(ids) == 208
        assert r.resident_prefix(ids[:13]) == 13  # the anchor's last block is tracked
        assert r.resident_prefix(ids[:32] + [9999]) == 32
        assert r.fully_resident(ids[:13]) and r.fully_resident(ids)
        assert not r.fully_resident(ids[:16] + [9999] * 17)
    # a trace view (512-token blocks) is tracked block by block
    trace = ResidencyShadow(capacity_tokens=10_000, stride=0)
    fwd(trace, [1, 2, 3], tok=512)
    assert trace.stride == 1 and len(trace) == 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(1, 30)), min_size=1, max_size=40), st.integers(20, 300))
def test_strided_shadow_tracks_exact_lru_to_stride_granularity(prompts, cap_blocks):
    """Prompts share prefixes (one chain per family) and a family's prompts only grow, as a
    session's do. The strided shadow tracks each prompt's last block too, and drops an earlier
    prompt's tail once a longer one covers it, so it never holds more tokens than the exact LRU,
    never exceeds capacity, and never reports less of a prefix than the exact LRU minus one
    stride; with no eviction both agree to a stride."""
    k = 4
    exact = ResidencyShadow(16 * cap_blocks, stride=1)
    coarse = ResidencyShadow(16 * cap_blocks, stride=k)
    longest: dict[int, int] = {}
    for family, length in prompts:
        length = longest[family] = max(length, longest.get(family, 0))
        ids = [family * 1000 + b for b in range(length)]
        fwd(exact, ids)
        fwd(coarse, ids)
        assert coarse.used_tokens <= min(exact.used_tokens, 16 * cap_blocks)
    evicted = exact.evicted_tokens > 0
    for family in range(8):
        for length in (1, 5, 13, 30):
            ids = [family * 1000 + b for b in range(length)]
            e, c = exact.resident_prefix(ids), coarse.resident_prefix(ids)
            assert c >= e - (k - 1)
            if not evicted:
                assert c <= e


def test_horizon_grows_the_tail_zone_with_the_insert_rate():
    r = ResidencyShadow(capacity_tokens=16 * 100, near_eviction_fraction=0.1, horizon_s=2.0)
    t = 0.0
    for k in range(40):  # 4 blocks (64 tokens) a second, cache full after 25 s
        r.on_forward(view_from_blocks("", [1000 + 4 * k + j for j in range(4)], 16), t)
        t += 1.0
    assert r.rates.insert_rate == pytest.approx(64.0, rel=0.05)
    assert r.zone_tokens() == pytest.approx(max(0.1 * 1600, 2.0 * 64.0), rel=0.05)
    fast = ResidencyShadow(capacity_tokens=1600, near_eviction_fraction=0.1, horizon_s=60.0)
    for k in range(40):
        fast.on_forward(view_from_blocks("", [1000 + 4 * k + j for j in range(4)], 16), float(k))
    assert fast.zone_tokens() == 1600  # capped at capacity
    assert ResidencyShadow(1600, 0.1).zone_tokens() == 160  # no horizon: the fixed share


class _ReferenceLRU:
    """Textbook LRU over blocks, touched deepest-first, for checking the queue-based shadow."""

    def __init__(self, cap):
        from collections import OrderedDict

        self.cap, self.od = cap, OrderedDict()

    def touch(self, ids, tok):
        for h in reversed(ids):
            if h in self.od:
                self.od.move_to_end(h)
            else:
                self.od[h] = tok
        while sum(self.od.values()) > self.cap:
            self.od.popitem(last=False)

    def tail(self, budget):
        out, acc = set(), 0
        for h, t in self.od.items():
            if acc >= budget:
                break
            out.add(h)
            acc += t
        return out


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 9), st.integers(1, 12), st.booleans()), min_size=1, max_size=120),
    st.integers(8, 60),
)
def test_queue_lru_matches_a_reference_lru_exactly(ops, cap_blocks):
    import proxy.core.residency as residency_mod

    old = residency_mod._COMPACT_SLACK
    residency_mod._COMPACT_SLACK = 4  # exercise compaction constantly
    try:
        r = ResidencyShadow(16 * cap_blocks, near_eviction_fraction=0.25, stride=1)
        ref = _ReferenceLRU(16 * cap_blocks)
        for family, length, check in ops:
            ids = [family * 100 + b for b in range(length)]
            fwd(r, ids)
            ref.touch(ids, 16)
            assert set(r._stamp) == set(ref.od)
            assert r.used_tokens == sum(ref.od.values())
            if check and r.used_tokens >= 16 * cap_blocks * 0.75:
                budget = 0.25 * 16 * cap_blocks - (16 * cap_blocks - r.used_tokens)
                tail = ref.tail(budget)
                for h in ref.od:
                    assert r.near_eviction([h]) == (h in tail), (h, budget)
    finally:
        residency_mod._COMPACT_SLACK = old


def _reference_sample(stride, hashes, tokens, extra):
    """The sampling rule written out plainly (what the memoised _sample must reproduce)."""
    n = len(hashes)
    if stride <= 1 or n == 0:
        return list(hashes), list(tokens)
    pos = list(range(stride - 1, n, stride))
    if 0 <= extra < n and extra % stride != stride - 1:
        pos = sorted(pos + [extra])
    if n - 1 not in pos:  # the prompt's last block: its tail is tracked too
        pos.append(n - 1)
    seg, prev = [], 0
    for i in pos:
        seg.append(sum(tokens[prev : i + 1]))
        prev = i + 1
    return [hashes[i] for i in pos], seg


def test_memoised_sampling_matches_the_plain_rule():
    """Shapes are cached per (length, anchor end, stride) and segment sizes per block size: the
    same shape with other block sizes (uniform, first block different, ragged) must not reuse a
    wrong entry."""
    import random

    rng = random.Random(7)
    for stride in (2, 3, 16):
        shadow = ResidencyShadow(0, stride=stride)
        for _ in range(400):
            n = rng.choice([0, 1, 2, 3, 15, 16, 17, 40])
            kind = rng.randrange(4)
            if kind == 3 and n >= 3:
                tokens = [16] * n  # uniform but for one block past the first
                tokens[rng.randrange(1, n)] = 9
            elif kind == 0 or kind == 3:
                tokens = [16] * n
            elif kind == 1:
                tokens = [rng.choice([3, 16, 40])] + [16] * max(0, n - 1)
                tokens = tokens[:n]
            else:
                tokens = [rng.randint(1, 32) for _ in range(n)]
            hashes = [rng.getrandbits(48) for _ in range(n)]
            extra = rng.choice([-1, 0, 5, 23, n - 1, n + 3])
            got_h, got_t = shadow._sample(tuple(hashes), tuple(tokens), extra)
            want_h, want_t = _reference_sample(stride, hashes, tokens, extra)
            assert list(got_h) == want_h and list(got_t) == want_t, (stride, n, kind, extra)


def test_compaction_dropping_stale_entries_keeps_the_tail_zone_cursor_consistent(monkeypatch):
    """Re-touching the same few prompts piles stale queue entries up until the compaction filters
    them out; afterwards the zone cursor must still count exactly the live entries behind it, and
    near-eviction answers must match a reference LRU."""
    import proxy.core.residency as residency_mod

    monkeypatch.setattr(residency_mod, "_COMPACT_SLACK", 4)
    r = ResidencyShadow(16 * 40, near_eviction_fraction=0.25, stride=1)
    ref = _ReferenceLRU(16 * 40)
    rng = random.Random(3)
    filtered = 0
    for step in range(600):
        fam = rng.choice([0, 1, 2]) if step % 7 else rng.randrange(3, 30)  # mostly re-touches
        ids = [fam * 100 + b for b in range(rng.randint(2, 10))]
        before = len(r._qs)
        fwd(r, ids)
        if len(r._qs) < before:
            filtered += 1
        ref.touch(ids, 16)
        assert set(r._stamp) == set(ref.od)
        r.near_eviction([ids[0]])  # moves the zone cursor
        live_behind = sum(
            r._tok[h] for s, h in zip(r._qs[r._head : r._cur], r._qh[r._head : r._cur]) if r._stamp.get(h) == s
        )
        assert live_behind == r._zone_tok
        if r.used_tokens >= 16 * 40 * 0.75:
            budget = 0.25 * 16 * 40 - (16 * 40 - r.used_tokens)
            tail = ref.tail(budget)
            for h in ref.od:
                assert r.near_eviction([h]) == (h in tail)
    assert filtered > 0


@pytest.mark.parametrize("stride", [1, 2, 16])
def test_verdict_answers_like_the_three_separate_questions(stride):
    r = ResidencyShadow(16 * 60, near_eviction_fraction=0.25, stride=stride)
    rng = random.Random(stride)
    prompts = [[fam * 1000 + b for b in range(rng.randint(0, 40))] for fam in range(12)]
    for step in range(300):
        ids = rng.choice(prompts)
        fwd(r, ids) if ids else None
        probe = rng.choice(prompts)
        probe = probe[: rng.randint(0, len(probe))]
        full = r.fully_resident(probe)
        want = (r.resident_prefix(probe), full, full and r.near_eviction(probe))
        assert r.verdict(probe) == want, (step, len(probe))


def test_strided_shadow_sees_a_prompts_evicted_tail():
    """A prompt's last blocks past its last stride block are tracked and charged: the shadow
    fills as the engine's cache does and evicts when the engine would (issue 25: untracked tails
    made the shadow hold more than the cache, and call evicted session contexts resident).
    Residency stays exact to a stride."""
    exact, coarse = ResidencyShadow(16 * 12, stride=1), ResidencyShadow(16 * 12, stride=4)
    a = list(range(1, 11))  # 10 blocks: stride entries at blocks 3 and 7, the tail at block 9
    for shadow in (exact, coarse):
        fwd(shadow, a)
        fwd(shadow, list(range(101, 107)))  # 16 blocks in a 12-block cache: a's 4 deepest go
    assert exact.resident_prefix(a) == 6
    # untracked tails (10 + 6 blocks charged as 8 + 4) would leave a's first 8 blocks "resident"
    assert exact.resident_prefix(a) - 3 <= coarse.resident_prefix(a) <= exact.resident_prefix(a)
    assert coarse.used_tokens <= exact.used_tokens


def test_a_longer_prompt_absorbs_the_tail_it_covers():
    """A session's next prompt extends its last one: the earlier tail's tokens are counted by the
    new prompt's entries, so the earlier tail entry is dropped rather than charged twice."""
    shadow = ResidencyShadow(0, stride=4)
    fwd(shadow, list(range(1, 7)))  # entries at blocks 3 and 5 (its tail): 6 blocks
    assert shadow.used_tokens == 16 * 6
    fwd(shadow, list(range(1, 12)))  # entries at 3, 7 and 10 (its tail): 11 blocks, block 5 absorbed
    assert shadow.used_tokens == 16 * 11 and 6 not in shadow
