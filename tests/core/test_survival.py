"""Survival scoring: BFS hop distances over edges with P >= τ, p_surv, scores, continuation."""

from __future__ import annotations

import math

import pytest

from proxy.core.survival import anchor_score, continuation_probability, hop_distances, median_gap, p_surv
from proxy.core.transitions import TransitionLearner


def chain(n, edges, reps=50):
    t = TransitionLearner(epsilon=0.01, half_life=0)
    for s in range(n):
        t.add_slot(s)
    for _ in range(reps):
        for a, b in edges:
            t.update(a, b)
    return t


def test_bfs_distances_on_a_pipeline():
    t = chain(6, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0)])
    assert hop_distances(t, [0], 3, 0.1) == {0: 0, 1: 1, 2: 2, 3: 3}
    assert hop_distances(t, [0], 10, 0.1) == {i: i for i in range(6)}
    # multi-source: the minimum over sessions
    assert hop_distances(t, [0, 3], 3, 0.1) == {0: 0, 1: 1, 2: 2, 3: 0, 4: 1, 5: 2}


def test_bfs_ignores_edges_below_tau():
    # 0 -> 1 nine times out of ten, 0 -> 2 once: P(0->2) ~ 0.1
    t = TransitionLearner(epsilon=0.01, half_life=0)
    for s in range(4):
        t.add_slot(s)
    for k in range(100):
        t.update(0, 2 if k % 10 == 0 else 1)
    t.update(2, 3)
    assert hop_distances(t, [0], 3, 0.05) == {0: 0, 1: 1, 2: 1, 3: 2}
    assert hop_distances(t, [0], 3, 0.2) == {0: 0, 1: 1}


def test_p_surv_and_score():
    assert [p_surv(e, 3) for e in (0, 1, 2, 3, 7)] == pytest.approx([1, 2 / 3, 1 / 3, 0, 0])
    assert p_surv(None, 3) == 0.0
    s = anchor_score(2 / 3, 10.0, 100, delta=0.1, lam=0.05)
    assert s == pytest.approx((2 / 3 + 0.1) * (math.exp(-0.5) + 0.1) * 100)
    # closer and fresher anchors outrank farther/staler ones of equal size
    assert (
        anchor_score(1.0, 0, 100, 0.1, 0.05)
        > anchor_score(2 / 3, 0, 100, 0.1, 0.05)
        > anchor_score(2 / 3, 60, 100, 0.1, 0.05)
    )
    assert anchor_score(0.0, 1e9, 100, 0.1, 0.05) == pytest.approx(0.1 * 0.1 * 100)  # δ floors


def test_continuation_probability():
    # few samples: priors (high after tool_calls)
    assert continuation_probability([], 0.0, 60, True, 0.9) == 0.9
    assert continuation_probability([1.0], 0.0, 60, False, 0.9) < 0.5
    gaps = [1.0, 2.0, 3.0, 100.0]
    assert continuation_probability(gaps, 0.0, 10.0, False, 0.9) == pytest.approx(0.75)
    assert continuation_probability(gaps, 2.5, 10.0, False, 0.9) == pytest.approx(0.5)  # {3, 100} alive
    assert continuation_probability(gaps, 50.0, 10.0, False, 0.9) == 0.0  # only 100 alive, > 60
    assert continuation_probability(gaps, 200.0, 10.0, False, 0.9) < 0.1  # beyond all samples
    assert median_gap([5.0, 1.0, 3.0]) == 3.0 and median_gap([]) is None
