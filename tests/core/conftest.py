"""Helpers for the policy-core tests: synthetic agents and views built from block ids."""

from __future__ import annotations

import itertools

import pytest

from proxy.core import PolicyConfig, ResponseOutcome, ScoutPolicy, view_from_blocks

ANCHOR = 8  # blocks per agent anchor
BLOCK = 16  # tokens per block


class Workload:
    """Agents with fixed anchors (block ids agent*1000 + 1..ANCHOR) and per-session histories."""

    def __init__(self, policy: ScoutPolicy, tenant: str = "") -> None:
        self.policy = policy
        self.tenant = tenant
        self.hist: dict[str, list[int]] = {}
        self._ids = itertools.count(10_000_000)

    def anchor(self, agent: int) -> list[int]:
        return [agent * 1000 + b + 1 for b in range(ANCHOR)]

    def view(self, agent: int, session: str, new_blocks: int = 1, **kw):
        h = self.hist.setdefault(session, [])
        h.extend(next(self._ids) for _ in range(new_blocks))
        return view_from_blocks(
            self.tenant,
            self.anchor(agent) + h,
            BLOCK,
            anchor_blocks=ANCHOR,
            session_id=session,
            anchor_payload={"agent": agent},
            context_payload={"session": session},
            **kw,
        )

    def step(self, agent: int, session: str, now: float, finish: str = "stop", dur: float = 0.1):
        obs = self.policy.observe_request(self.view(agent, session), now)
        self.policy.observe_response(obs.request_id, ResponseOutcome(finish), now + dur)
        return obs

    def junk(self, tokens: int, now: float) -> None:
        """Forward unrelated one-off prompts (warmup-flagged so nothing is learned) to fill the cache."""
        n = max(1, tokens // BLOCK)
        ids = [next(self._ids) for _ in range(n)]
        self.policy.observe_request(view_from_blocks(self.tenant, ids, BLOCK, is_warmup=True), now)


def quiet_config(**kw) -> PolicyConfig:
    base = {
        "r_min_transitions": 5,
        "sweep_interval_s": 1e9,
        "residency_stride": 1,
        "cooldown_s": 5.0,
        "max_concurrent": 8,
        "max_actions_per_tick": 8,
        "warm_lifetime_share": 0.0,
        "warm_max_cache_share": 0.0,
    }
    base.update(kw)
    return PolicyConfig(**base)


@pytest.fixture
def workload():
    def make(**kw) -> Workload:
        return Workload(ScoutPolicy(quiet_config(**kw)))

    return make
