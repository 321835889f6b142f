"""The tool-resume source: a session paused on ``tool_calls`` keeps its own context for the tool's
answer.

Why wakes (issue 25): the pause is planned when it starts, and then the context was just used —
resident, nothing to do. What decides the resume's TTFT is whether the context is still there when
the tool returns, seconds later, after other sessions' traffic went through the cache. So each pause
is offered again at wakes set from the agent's own learned tool pauses (its
``resume_wake_quantiles``, each less the context's prefill time and ``resume_wake_margin_s``, so
that a warm lands before the resume): at a wake the filters and the pricer see the context as it is
then (resident -> nothing; near the LRU tail -> a touch; evicted -> a warm, when the engine has
slack and the price is right). When the pause is planned and a wake is to come, a warm waits for the
wake: made then (the tick after the response, or the first calm one after it), it lands between the
other sessions' requests and the rest of their burst evicts it again (CI's e2e check 7,
docs/results/replay-capture.md "A tool pause's warm waits for its wake"). Until the agent has
``continuation_min_samples`` pauses of its own, its tenant's pooled tool pauses stand in (in a team
every agent calls tools; the first pauses of a fresh proxy would otherwise go unplanned). In the
demo's replay cell (docs/demo.md, 3 seeds) the wakes, the pooled pauses and the shadow's tail
accounting took scout-proxy from -7% to -14% mean TTFT (median) at the demo's load (the oracle
keeper: -40%).

Bounded: at most ``len(resume_wake_quantiles)`` heap entries per pause; a wake whose session
resumed, ended or paused again is dropped when it comes up, and the heap is refiltered when it
outgrows a few per tracked session.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from .actions import REASON_TOOL_RESUME
from .agents import Agent, AgentRegistry
from .candidates import Candidate, Tick
from .config import PolicyConfig
from .plan_contexts import context_candidate
from .sessions import Session
from .survival import continuation_probability

TOOL_RESUME = "tool_resume"


def wake_gaps(registry: AgentRegistry, agent: Agent, cfg: PolicyConfig) -> Sequence[float] | None:
    """The tool pauses an agent's wakes go by: its own once it has ``continuation_min_samples``,
    else its tenant's pooled ones (in a team every agent calls tools), else None (no wakes: the
    session sweep keeps re-checking the pause)."""
    n = cfg.continuation_min_samples
    if not cfg.resume_wake_quantiles:
        return None
    if len(agent.tool_gaps) >= n:
        return agent.tool_gaps
    pooled = registry.tenant(agent.tenant).tool_gaps
    return pooled if len(pooled) >= n else None


class ToolResume:
    """A session paused on ``tool_calls``: its own context, for the tool's answer — offered when the
    pause starts and again at the wakes ``schedule`` sets (the agent's learned tool-pause quantiles,
    each less the context's prefill time), when the context may have been evicted meanwhile."""

    name = TOOL_RESUME

    def __init__(self) -> None:
        self.wakes: list[tuple[float, tuple[str, str], float]] = []  # heap of (when, session, its pause's start)

    def schedule(self, t: Tick, s: Session, agent: Agent) -> int:
        """Wakes for this pause: at each of ``resume_wake_quantiles`` of the agent's tool pauses (once
        ``continuation_min_samples`` are seen), less the prefill time of the context."""
        cfg = t.p.cfg
        gaps = wake_gaps(t.p.registry, agent, cfg)
        if gaps is None or s.last_end is None:
            return 0
        if len(self.wakes) > 4 * len(cfg.resume_wake_quantiles) * cfg.max_sessions:  # stale ones, rarely
            live = t.p.sessions.sessions
            self.wakes = [w for w in self.wakes if (x := live.get(w[1])) is not None and x.last_end == w[2]]
            heapq.heapify(self.wakes)
        xs = sorted(gaps)
        # the context's prefill (or, with a host tier, its load, inside the prefetch window), and the
        # margin for the tick and the action's round trip
        lead = cfg.reload_s(sum(s.block_tokens)) + (cfg.prefetch_window_s / 2 if cfg.host_tier_tokens else 0.0)
        lead += cfg.resume_wake_margin_s
        n = 0
        for at in sorted(
            {s.last_end + xs[min(len(xs) - 1, int(q * len(xs)))] - lead for q in cfg.resume_wake_quantiles}
        ):
            if at > t.now:
                heapq.heappush(self.wakes, (at, s.key, s.last_end))
                n += 1
        return n

    def due(self, t: Tick) -> None:
        """Offer the sessions whose wake came and that still wait on the same tool call."""
        wakes, now, p_ = self.wakes, t.now, t.p
        offered: set[tuple[str, str]] = set()
        while wakes and wakes[0][0] <= now:
            _, key, end = heapq.heappop(wakes)
            s = p_.sessions.sessions.get(key)
            if s is None or key in offered or s.inflight or s.last_end != end or s.finish != "tool_calls":
                continue
            agent = s.agent
            if agent is None or p_.registry.by_id.get(agent.agent_id) is not agent:
                continue
            offered.add(key)
            elapsed = now - end
            self.session(t, s, agent, elapsed, pause_lead(agent.tool_gap_median, elapsed))

    def session(
        self, t: Tick, s: Session, agent: Agent, elapsed: float, lead: float | None, warm_ok: bool = True
    ) -> None:
        offer_pause(t, s, agent, elapsed, lead, warm_ok, t.out)


def pause_lead(median: float | None, elapsed: float) -> float | None:
    """Seconds until the pause's median end, or None (no median yet, or past it)."""
    return median - elapsed if median is not None and elapsed < median else None


def offer_pause(
    t: Tick, s: Session, agent: Agent, elapsed: float, lead: float | None, warm_ok: bool, out: list[Candidate]
) -> None:
    """A tool-paused session's context as a candidate in ``out``, unless its resume is unlikely
    (``tool_resume_min_p``) or the gate is asked and shut: the one check for the tool resume's
    offers and the session sweep's."""
    cfg, p_ = t.p.cfg, t.p
    if not (s.hashes and s.context_payload is not None):
        p_._drop("no_context", t.now, REASON_TOOL_RESUME, agent.agent_id, agent.tenant)  # nothing to rebuild
        return
    p = continuation_probability(
        agent.tool_gaps,
        elapsed,
        cfg.continuation_horizon_s,
        True,
        cfg.tool_resume_prior,
        cfg.continuation_prior,
        cfg.continuation_min_samples,
    )
    if p < cfg.tool_resume_min_p:
        p_._drop("resume_unlikely", t.now, REASON_TOOL_RESUME, agent.agent_id, agent.tenant, p)
    elif cfg.tool_resume_gated and "gate" not in t.off and not t.gate(agent.tenant):
        p_._drop("gate_closed", t.now, REASON_TOOL_RESUME, agent.agent_id, agent.tenant, p)
    else:
        out.append(context_candidate(s, agent.tenant, p, REASON_TOOL_RESUME, lead=lead, warm_ok=warm_ok, session=s.key))
