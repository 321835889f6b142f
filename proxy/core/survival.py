"""Survival scoring: how soon will an anchor (or a paused session's context) be needed again?

Leaf math only (it imports no registry: ``plan_sweep.reachable_agents`` walks the registry with
``hop_distances`` and ``p_surv``, so agents -> survival is one-way).

Anchors: a multi-source BFS from the current agent of every live session, over edges with
P_ij >= τ, gives each agent its hop distance E (the minimum over sessions); then

    p_surv = 1 − min(E, K)/K          score = (p_surv + δ) · (e^(−λ·age) + δ) · tokens

as in the paper (age = seconds since the agent was last seen). Unreachable agents get E = K.

Sessions: the probability that a paused session resumes within a horizon H, from the gaps
(response end -> next request) observed for its agent, conditioned on having already waited
``elapsed``:  P(gap <= elapsed + H | gap > elapsed). A ``tool_calls`` finish uses the tool-gap
samples and, with fewer than ``min_samples`` (3) samples, a high prior (the client is running a tool and will
come back with its result).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from .transitions import TransitionLearner


def hop_distances(learner: TransitionLearner, sources: Iterable[int], max_hops: int, tau: float) -> dict[int, int]:
    """Multi-source BFS: slot -> hops from the nearest source, only within ``max_hops``."""
    fan = max(1, math.ceil(1.0 / tau)) if tau > 0 else learner.n_agents
    dist: dict[int, int] = {}
    frontier = []
    for s in sources:
        if s not in dist:
            dist[s] = 0
            frontier.append(s)
    depth = 0
    while frontier and depth < max_hops:
        depth += 1
        nxt = []
        for i in frontier:
            for j, _p in learner.successors(i, fan, tau):
                if j not in dist:
                    dist[j] = depth
                    nxt.append(j)
        frontier = nxt
    return dist


def p_surv(hops: int | None, max_hops: int) -> float:
    if hops is None or max_hops <= 0:
        return 0.0
    return 1.0 - min(hops, max_hops) / max_hops


def anchor_score(p: float, age: float, tokens: int, delta: float, lam: float) -> float:
    return (p + delta) * (math.exp(-lam * max(0.0, age)) + delta) * tokens


def continuation_probability(
    samples: Sequence[float],
    elapsed: float,
    horizon: float,
    after_tool_calls: bool,
    tool_prior: float,
    other_prior: float = 0.3,
    min_samples: int = 3,
) -> float:
    """P(the session resumes within ``horizon`` | it has been paused ``elapsed`` seconds);
    the prior for its finish kind until ``min_samples`` gaps were seen."""
    if len(samples) < min_samples:
        return tool_prior if after_tool_calls else other_prior
    alive = [g for g in samples if g > elapsed]
    if not alive:
        return 0.05  # waited longer than ever observed: probably gone
    soon = sum(1 for g in alive if g <= elapsed + horizon)
    return soon / len(alive)


def median_gap(samples: Sequence[float]) -> float | None:
    if not samples:
        return None
    s = sorted(samples)
    return s[len(s) // 2]
