"""TransitionLearner: smoothing, decay, top-1 accuracy, and R on synthetic chains."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.transitions import TransitionLearner


def learner(n, **kw):
    t = TransitionLearner(**kw)
    for s in range(n):
        t.add_slot(s)
    return t


def feed(t, seq):
    for a, b in itertools.pairwise(seq):
        t.update(a, b)
    return t


def test_smoothed_probability_formula():
    t = learner(3, epsilon=0.5, half_life=0)  # no decay
    feed(t, [0, 1, 0, 1, 0, 2])  # 0->1 twice, 0->2 once, 1->0 twice
    assert t.count(0, 1) == pytest.approx(2.0)
    assert t.prob(0, 1) == pytest.approx((2 + 0.5) / (3 + 0.5 * 3))
    assert t.prob(0, 0) == pytest.approx(0.5 / 4.5)
    assert sum(t.prob(0, j) for j in range(3)) == pytest.approx(1.0)
    assert t.successors(0, 2, 0.0) == [(1, pytest.approx(2.5 / 4.5)), (2, pytest.approx(1.5 / 4.5))]
    assert t.successors(0, 5, 0.4) == [(1, pytest.approx(2.5 / 4.5))]


def test_decay_halves_a_rows_counts_every_half_life_steps():
    t = learner(3, half_life=10)
    t.update(0, 1)
    for _ in range(10):
        t.update(0, 2)
    assert t.count(0, 1) == pytest.approx(0.5, rel=1e-9)
    assert t.count(0, 2) == pytest.approx(sum(0.5 ** (k / 10) for k in range(10)), rel=1e-9)
    t.update(1, 0)  # other rows do not decay row 0
    assert t.count(0, 1) == pytest.approx(0.5, rel=1e-9)


def test_decay_survives_renormalisation_over_long_runs():
    t = learner(2, half_life=1)  # scale underflows quickly without renormalising
    for _ in range(3000):
        t.update(0, 1)
    assert t.row_total(0) == pytest.approx(2.0, rel=1e-6)  # geometric series 1/(1-1/2)
    assert math.isfinite(t.prob(0, 1)) and t.prob(0, 1) > 0.9


def test_drift_is_followed():
    t = learner(3, half_life=20)
    feed(t, [0, 1] * 200)
    assert t.predict_top1(0) == 1
    feed(t, [0, 2] * 40)
    assert t.predict_top1(0) == 2


def test_online_top1_accuracy_counts_before_update():
    t = learner(3)
    assert t.update(0, 1) is None  # nothing to predict yet
    assert t.update(1, 2) is None
    assert t.update(2, 0) is None
    assert t.update(0, 1) is True
    assert t.update(1, 0) is False
    assert (t.predictions, t.hits) == (2, 1)


def test_remove_slot_forgets_row_and_column():
    t = feed(learner(3), [0, 1, 2, 0, 1, 2, 0])
    t.remove_slot(1)
    assert t.count(0, 1) == 0 and t.row_total(1) == 0
    assert t.predict_top1(0) is None or t.predict_top1(0) != 1
    assert t.successors(0, 3, 0.0) == []  # 0 only ever went to 1


# --- R on synthetic chains: estimator vs the analytic value of each chain, and vs the paper ------


def _pipeline(n, length):
    return [i % n for i in range(length)]


def _debate(length):  # two debaters alternate 3 rounds, then the judge (0), then again
    return ([1, 2, 1, 2, 1, 2, 0] * length)[:length]


def _selector(workers, length, rng):  # supervisor 0 picks a worker uniformly, worker returns
    seq = []
    while len(seq) < length:
        seq += [0, 1 + rng.randrange(workers)]
    return seq[:length]


def _random(n, length, rng):
    return [rng.randrange(n) for _ in range(length)]


def _analytic_r(h_next, h_cond):
    return (h_next - h_cond) / h_next


# analytic R for each chain: I(current; next) / H(next)
PIPELINE_R = 1.0
DEBATE_R = _analytic_r(
    2 * (3 / 7) * math.log2(7 / 3) + (1 / 7) * math.log2(7),
    (3 / 7) * (-(2 / 3) * math.log2(2 / 3) - (1 / 3) * math.log2(1 / 3)),
)
SELECTOR3_R = _analytic_r(0.5 + 0.5 * math.log2(6), 0.5 * math.log2(3))
SELECTOR5_R = _analytic_r(0.5 + 0.5 * math.log2(10), 0.5 * math.log2(5))


@pytest.mark.parametrize(
    "name,seq,n,expected,paper",
    [
        ("pipeline", _pipeline(6, 3000), 6, PIPELINE_R, 1.0),
        ("debate", _debate(3000), 3, DEBATE_R, 0.78),
        ("selector3", _selector(3, 3000, random.Random(1)), 4, SELECTOR3_R, 0.57),
        ("selector5", _selector(5, 3000, random.Random(2)), 6, SELECTOR5_R, 0.57),
        ("random", _random(6, 3000, random.Random(3)), 6, 0.0, 0.12),
    ],
)
def test_predictability_matches_the_chain(name, seq, n, expected, paper):
    t = feed(learner(n), seq)
    r = t.predictability(force=True)
    assert r == pytest.approx(expected, abs=0.05), (name, r, expected)
    assert abs(r - paper) <= 0.13, (name, r, paper)  # near the paper's reported values


def test_predictability_orders_chains_and_starts_low():
    rng = random.Random(5)
    rs = [
        feed(learner(6), s).predictability(force=True)
        for s in (_pipeline(6, 800), _debate(800), _selector(3, 800, rng), _random(6, 800, rng))
    ]
    assert rs == sorted(rs, reverse=True)
    early = feed(learner(6), _random(6, 12, rng)).predictability(force=True)
    assert early < 0.5  # smoothing keeps a young chain's R low
    assert learner(4).predictability(force=True) == 0.0


def test_single_agent_loop_is_fully_predictable():
    assert feed(learner(1), [0] * 10).predictability(force=True) == 1.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=2, max_size=200), st.floats(0.01, 2.0))
def test_probabilities_are_a_distribution_and_r_is_bounded(seq, eps):
    t = feed(learner(6, epsilon=eps, half_life=50), seq)
    for i in range(6):
        assert sum(t.prob(i, j) for j in range(6)) == pytest.approx(1.0)
    assert 0.0 <= t.predictability(force=True) <= 1.0
    assert t.steps == len(seq) - 1


def test_export_import_round_trip():
    t = feed(learner(4), _selector(3, 400, random.Random(7)))
    u = TransitionLearner()
    u.import_counts(t.export_counts(), t.export_visits())
    for i in range(4):
        for j in range(4):
            assert u.prob(i, j) == pytest.approx(t.prob(i, j), rel=1e-3)
    assert u.predictability(force=True) == pytest.approx(t.predictability(force=True), abs=1e-3)
    assert u.predict_top1(1) == t.predict_top1(1) == 0


def test_cached_r_follows_a_young_chain():
    t = learner(6)
    seq = _pipeline(6, 400)
    for k, (a, b) in enumerate(itertools.pairwise(seq)):
        t.update(a, b)
        if k == 10:
            early = t.predictability()
    late = t.predictability()  # no force: the cache must have moved on
    assert late > early + 0.2 and late == pytest.approx(t.predictability(force=True), abs=0.02)
