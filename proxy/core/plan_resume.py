"""The tool pauses' two sources: the tool resume (a session paused on ``tool_calls`` keeps its own
context for the tool's answer) and the session sweep that re-checks such pauses until their
agent's pauses are learned.

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

from .actions import REASON_SWEEP, REASON_TOOL_RESUME
from .agents import Agent, AgentRegistry
from .candidates import Candidate
from .config import PolicyConfig
from .plan_contexts import context_candidate
from .plan_filters import Gate
from .plan_piece import AT_SWEEP, PER_SESSION, SOURCE, Piece
from .plan_tick import Tick
from .sessions import Session
from .survival import continuation_probability

PAUSE_SETTINGS = (
    "continuation_min_samples", "continuation_horizon_s", "continuation_prior", "tool_resume_prior",
    "tool_resume_min_p", "tool_resume_gated",
)  # fmt: skip


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


class ToolResume(Piece):
    """A session paused on ``tool_calls``: its own context, for the tool's answer — offered when the
    pause starts and again at the wakes ``schedule`` sets (the agent's learned tool-pause quantiles,
    each less the context's prefill time), when the context may have been evicted meanwhile."""

    name = "tool_resume"
    kind = SOURCE
    cadence = PER_SESSION
    reasons = (REASON_TOOL_RESUME,)
    skips = ("no_context", "resume_unlikely")
    settings = (*PAUSE_SETTINGS, "resume_wake_quantiles", "resume_wake_margin_s")

    def __init__(self) -> None:
        self.wakes: list[tuple[float, tuple[str, str], float]] = []  # heap of (when, session, its pause's start)

    def begin(self, t: Tick) -> None:
        if self.wakes:
            self.due(t)

    def session(self, t: Tick, s: Session, agent: Agent, paused: bool, lead: float | None) -> None:
        """A pause that starts (or a session paused on a tool call that changed): planned now, and
        its wakes set. A warm waits for the pause's wakes or the session sweep when one comes
        later: planned now (the pause's start, or the first tick calm enough after it), a warm
        lands mid-burst and the rest of the burst evicts it again before the resume."""
        if not paused or s.finish != "tool_calls":
            return
        cfg = t.cfg
        elapsed = t.now - s.last_end if s.last_end is not None else 0.0  # (paused: it is set)
        woken = self.schedule(t, s, agent)
        later = woken > 0 or (
            t.on(SessionSweep.name)
            and cfg.sweep_sessions > 0
            and wake_gaps(t.registry, agent, cfg) is None
            and sweep_in_time(cfg, lead, s)
        )
        offer_pause(t, self.name, s, agent, elapsed, lead, not later, t.out)

    def schedule(self, t: Tick, s: Session, agent: Agent) -> int:
        """Wakes for this pause: at each of ``resume_wake_quantiles`` of the agent's tool pauses (once
        ``continuation_min_samples`` are seen), less the prefill time of the context."""
        cfg = t.cfg
        gaps = wake_gaps(t.registry, agent, cfg)
        if gaps is None or s.last_end is None:
            return 0
        if len(self.wakes) > 4 * len(cfg.resume_wake_quantiles) * cfg.max_sessions:  # stale ones, rarely
            live = t.sessions.sessions
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
        wakes, now = self.wakes, t.now
        offered: set[tuple[str, str]] = set()
        while wakes and wakes[0][0] <= now:
            _, key, end = heapq.heappop(wakes)
            s = t.sessions.sessions.get(key)
            if s is None or key in offered or s.inflight or s.last_end != end or s.finish != "tool_calls":
                continue
            agent = s.agent
            if agent is None or t.registry.by_id.get(agent.agent_id) is not agent:
                continue
            offered.add(key)
            elapsed = now - end
            offer_pause(t, self.name, s, agent, elapsed, pause_lead(agent.tool_gap_median, elapsed), True, t.out)


def pause_lead(median: float | None, elapsed: float) -> float | None:
    """Seconds until the pause's median end, or None (no median yet, or past it)."""
    return median - elapsed if median is not None and elapsed < median else None


def offer_pause(
    t: Tick,
    source: str,
    s: Session,
    agent: Agent,
    elapsed: float,
    lead: float | None,
    warm_ok: bool,
    out: list[Candidate],
) -> None:
    """A tool-paused session's context as a candidate in ``out``, unless its resume is unlikely
    (``tool_resume_min_p``) or the gate is asked and shut: the one check for the tool resume's
    offers and the session sweep's (``source``: which of the two offers it)."""
    cfg = t.cfg
    if not (s.hashes and s.context_payload is not None):
        t.drop(source, "no_context", source, REASON_TOOL_RESUME, agent.agent_id, agent.tenant)  # nothing to rebuild
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
        t.drop(source, "resume_unlikely", source, REASON_TOOL_RESUME, agent.agent_id, agent.tenant, p)
    elif cfg.tool_resume_gated and not t.gate(agent.tenant):
        t.drop(Gate.name, "gate_closed", source, REASON_TOOL_RESUME, agent.agent_id, agent.tenant, p)
    else:
        c = context_candidate(s, agent.tenant, p, REASON_TOOL_RESUME, lead=lead, warm_ok=warm_ok, session=s.key)
        c.source = source
        out.append(c)


def sweep_in_time(cfg: PolicyConfig, lead: float | None, s: Session) -> bool:
    """The next session sweep still lands a warm of ``s``'s context before its expected resume
    (``lead`` seconds away): a warm now would only give the traffic longer to evict it again. The
    next sweep comes an interval later at the earliest and may slip by up to another (it runs on a
    calm tick, and the live runtime ticks on a timer): two intervals to spare. (e2e check 7 with
    one interval: a 5 s pause's warm went at +4.97 s, 30 ms before the resume.)"""
    return lead is not None and lead - 2.0 * cfg.sweep_interval_s > cfg.reload_s(sum(s.block_tokens))


class SessionSweep(Piece):
    """Sessions paused on a tool call keep their context until their agent's tool pauses are learned.

    The tool resume plans a pause when it starts, when the context was just used (resident); its
    wakes re-check it at the agent's learned pause quantiles. Until an agent (or its tenant) has
    ``continuation_min_samples`` pauses, or with the wakes off, this sweep is what re-checks the
    pause, every ``sweep_interval_s`` on calm ticks: a fresh proxy's first tool resumes depend on it
    (``tests/live/test_tool_resume.py``). With a pause median known, a warm waits while the next
    sweep is still in time (``sweep_in_time``). Sessions paused after any other finish (a user's
    turn, the next agent of a team) are not swept: on the headroom grid keeping them made 17 of 288
    cell-seeds > 1% slower (chat-agents: human think times outlive the cache, and the touches cost
    more than they keep) and 1 faster (docs/results/replay-capture.md). Walks the most recently active
    ``sweep_sessions`` sessions only, so a sweep stays O(that)."""

    name = "session_sweep"
    kind = SOURCE
    cadence = AT_SWEEP
    reasons = (REASON_TOOL_RESUME,)
    skips = ("wait_for_slack", "no_agent", "no_context", "resume_unlikely")
    settings = (*PAUSE_SETTINGS, "sweep_interval_s", "sweep_sessions", "sweep_top_n")

    def collect(self, t: Tick) -> None:
        cfg = t.cfg
        if not t.sweep_due or not cfg.sweep_sessions:
            return
        now = t.now
        if not t.calm:
            # a paused context is where the shadow and the engine disagree most (the tail zone): its
            # "touch" often re-prefills thousands of tokens, and on an FCFS engine prefilling for
            # clients that delays them and every arrival behind them (docs/results/replay-capture.md)
            t.drop(self.name, "wait_for_slack", self.name, REASON_SWEEP)
            return
        woken = bool(cfg.resume_wake_quantiles) and t.on(ToolResume.name)
        scored: list[Candidate] = []
        for k, s in enumerate(reversed(t.sessions.sessions.values())):
            if k >= cfg.sweep_sessions:
                break
            agent = s.agent
            if s.inflight or s.last_end is None or s.finish != "tool_calls":
                continue
            if woken and agent is not None and wake_gaps(t.registry, agent, cfg) is not None:
                continue  # the tool resume's wakes re-check it
            if agent is None or agent.forgotten:
                t.drop(self.name, "no_agent", self.name, REASON_TOOL_RESUME)
                continue
            elapsed = now - s.last_end
            lead = pause_lead(agent.tool_gap_median, elapsed)
            offer_pause(t, self.name, s, agent, elapsed, lead, not sweep_in_time(cfg, lead, s), scored)
        scored.sort(key=lambda c: c.score, reverse=True)
        t.out.extend(scored[: cfg.sweep_top_n])
