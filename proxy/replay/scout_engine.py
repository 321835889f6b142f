"""`scout-engine`: the paper's in-engine eviction (its vLLM fork) as the engine pool's eviction order.

Every block belongs to the agent that last used it (anchor blocks; other blocks form one p_surv = 0
group) and the victim minimises (p_surv(agent)+δ)·(e^(−λ·age)+δ), with agents and p_surv taken
from the same core as `scout-proxy` (its agent registry, transition learner and survival BFS, as
the planner's sweep uses them). It needs no actions, so it reports no signal tables. Split from
scout.py, which holds the proxy policies.
"""

from __future__ import annotations

import math

from proxy.core.plan_sweep import reachable_agents
from proxy.core.policy import ScoutPolicy
from proxy.replay.policies import ScoredEvictionPolicy
from proxy.replay.scout import _ScoutBase, build_config

HISTORY = "__history__"  # the group of non-anchor blocks (p_surv = 0: age only)


class ScoutEnginePolicy(_ScoutBase, ScoredEvictionPolicy):
    """In-engine survival-scored eviction (the paper's vLLM fork), fed by the same core."""

    name = "scout-engine"

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.requests = requests
        self.sp = ScoutPolicy(build_config(capacity_blocks, self.block_size, self.settings))
        cfg = self.sp.config
        self.delta = cfg.delta
        self.lam = cfg.age_lambda
        self._rid: dict[int, int] = {}
        self._agent: dict[int, tuple[str | None, int]] = {}  # request -> (agent, anchor blocks)
        self.inflight = 0
        self._surv: dict = {}
        self._surv_at = -1.0
        self._cur: tuple | None = None  # (request freeing its blocks, its agent, its anchor blocks)

    def _group_of(self, key):
        j = self._freeing_index()
        if j is None:
            return None
        cur = self._cur
        if cur is None or cur[0] != j:
            agent, k = self._agent.pop(j, (None, 0))
            cur = self._cur = (j, agent, frozenset(self.requests[j].block_hashes[:k]))
        return cur[1] if key in cur[2] else HISTORY  # only anchors carry an agent's survival

    def _score(self, agent, last: float, now: float) -> float:
        if now != self._surv_at:  # survival is re-read once per `now` (the evictor's score window)
            self._surv = survival_by_agent(self.sp)
            self._surv_at = now
        p = self._surv.get(agent, 0.0)
        return math.log(p + self.delta) + math.log(math.exp(-self.lam * (now - last)) + self.delta)

    def on_request(self, i, req, now):
        obs = self.sp.observe_request(self._view(req), now)
        self._rid[i] = obs.request_id
        self.inflight += 1
        a = self.sp.agents.by_id.get(obs.agent_id) if obs.agent_id else None
        self._agent[i] = (obs.agent_id, len(a.anchor_hashes) if a is not None else 0)
        self._ev.version += 1  # the core learned: survival may have changed
        self._surv_at = -1.0

    def on_response(self, i, req, hit_blocks, now):
        self._observe_response(i, req, hit_blocks, now)


def survival_by_agent(sp: ScoutPolicy) -> dict[str, float]:
    """p_surv of every agent reachable within K hops of a live session's current agent."""
    cfg = sp.config
    return {a.agent_id: p for a, p in reachable_agents(sp.agents, sp.sessions.on_agent, cfg.max_hops, cfg.tau)}
