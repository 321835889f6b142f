"""ScoutPolicy: the facade the live proxy and the replay evaluator drive.

observe_request -> (shadow, agent, session, transition learning) ; observe_response -> (gaps,
pause state) ; plan -> actions ; record_action_result -> (budget, shadow). Everything takes an
explicit ``now`` so the replay can run in virtual time; nothing here blocks or does I/O.
"""

from __future__ import annotations

from collections import OrderedDict

from . import snapshot as _snapshot
from .action_payload import ActionPayload
from .actions import REASON_TRANSITION, Action, ObservedRequest, PolicyStats
from .agents import Agent, AgentRegistry
from .config import PENDING_PER_SESSION, PRUNE_SLACK, PolicyConfig
from .lineages import LineageBook
from .plan_filters import Deferred
from .plan_sources import Successors
from .planner import Planner
from .residency import ResidencyShadow
from .session_tags import peek_conversation
from .sessions import Session, SessionTracker, session_bytes
from .view import EngineLoad, RequestView, ResponseOutcome

NO_LOAD = EngineLoad()  # an idle engine: the default when the caller knows no load


class ScoutPolicy:
    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = cfg = config or PolicyConfig()
        self.residency = ResidencyShadow(
            cfg.residency_capacity_tokens,
            cfg.near_eviction_fraction,
            cfg.residency_stride,
            cfg.residency_stride_tokens,
            cfg.residency_max_entries,
            cfg.near_eviction_horizon_s,
        )
        self.agents = AgentRegistry(cfg)
        self.sessions = SessionTracker(cfg)
        self.agents.on_evict = self.sessions.forget_agent
        # the engine's host-memory tier (write-through, its own LRU): a second shadow over the same stream
        self.host_residency = (
            ResidencyShadow(
                cfg.host_tier_tokens,
                cfg.near_eviction_fraction,
                cfg.residency_stride,
                cfg.residency_stride_tokens,
                cfg.residency_max_entries,
                cfg.near_eviction_horizon_s,
            )
            if cfg.host_tier_tokens > 0
            else None
        )
        self.planner = Planner(cfg, self.agents, self.sessions, self.residency)
        self.planner.host_residency = self.host_residency
        # text views' lineages (no chat view, no marked anchor: lineages.py), for LineageResume
        self.lineages = self.planner.lineages = LineageBook(cfg.gap_samples)
        # request id -> its session and its place there (session.requests when it was sent)
        self._pending: OrderedDict[int, tuple[Session, int]] = OrderedDict()
        self._acted: dict[tuple[str, int], tuple[str, int, float]] = {}  # (tenant, last hash) -> (reason, tokens, when)
        self._next_id = 0
        self.requests = 0
        self.skipped_warmups = 0
        self.fanouts = 0  # fan-out parents detected
        self.tool_resumes = 0  # same-agent resumes after tool_calls (not learned as transitions)
        self._dormant: dict[str, _snapshot.SavedTenant] = {}  # restored salted tenants not seen yet
        self._fanout_bytes = 0  # parked fan-out parents since the planner last cleared them
        self.fanout_dropped = 0  # fan-out parents not parked: over fanout_max_bytes

    # --- inputs ------------------------------------------------------------------------------------
    def observe_request(self, view: RequestView, now: float, context_payload: object = None) -> ObservedRequest:
        """A request is being forwarded: feed the shadow; learn from it unless it is a warmup.
        ``context_payload`` (optional) replaces ``view.context_payload`` as what the session keeps
        (the live proxy passes the body bytes instead of the parsed copy, without rebuilding the view)."""
        self._next_id += 1
        rid = self._next_id
        if view.is_warmup or not view.block_hashes:
            hit = self.residency.on_forward(view, now)
            if self.host_residency is not None:
                self.host_residency.on_forward(view, now)
            self.skipped_warmups += view.is_warmup
            return ObservedRequest(rid, None, view.session_id, None, hit)
        self.requests += 1
        ctx_payload = view.context_payload if context_payload is None else context_payload
        agents = self.agents
        if self._dormant and view.tenant not in agents.tenants:
            self._adopt(view.tenant)
        # recurrence is counted over conversation lineage, never over the explicit id: real apps send
        # one id (a run, a constant `user` or prompt_cache_key) over many agents and calls (issue 23)
        agent = agents.identify(view, now)
        anchor_len = len(agent.anchor_hashes) if agent else 0
        hit = self.residency.on_forward(view, now, anchor_len if agent else None)
        if self.host_residency is not None:
            self.host_residency.on_forward(view, now, anchor_len if agent else None)
        # blocks every request of the agent shares are never session boundaries: its recurring
        # prefix (while no agent is known: the view's marked anchor, or what other sources share).
        # A parent whose whole prompt later became the agent's anchor still counts (floor - 1).
        floor = anchor_len if agent is not None else max(view.anchor_blocks, agents.shared_depth)
        session = self.sessions.resolve(
            view,
            now,
            max(floor - 1, agents.shared_depth) if agent else floor,
            anchor_len if agent else max(view.anchor_blocks, view.header_blocks),
        )
        predicted = None
        # the conversation's previous agent; a conversation just started in a run: the run's latest
        # one, when that handed off by a tool call (a supervisor's ConductResearch, a handoff tool).
        # Not otherwise: a constant id (`user`, prompt_cache_key) over concurrent unrelated chats
        # would teach noise from one chat's agent to another's first.
        prev_s: Session | None = session
        if not session.requests:
            run_prev = self.sessions.run_prev
            prev_s = run_prev if run_prev is not None and run_prev.finish == "tool_calls" else None
        prev = prev_s.agent if prev_s is not None else None
        if (
            agent is not None
            and prev is not None
            and prev_s is not None
            and agents.by_id.get(prev.agent_id) is prev  # alive
            and prev.tenant == agent.tenant
        ):
            # a session resumed by its own agent after a tool_calls answer is the same turn going
            # on (the tool result), not an agent->agent transition: learning it as a self-loop
            # would teach "A follows A" where the workflow says "B follows A"
            if not (prev is agent and prev_s.finish == "tool_calls"):
                predicted = agents.tenant(agent.tenant).learner.update(prev.slot, agent.slot)
            else:
                self.tool_resumes += 1
            if prev_s is session and session.last_end is not None and session.inflight == 0:
                agents.record_gap(prev, now - session.last_end, session.finish)
        kept = None
        if self.config.lineage_resume and not view.history_keys and view.anchor_blocks == 0:  # a text view
            kept = self.lineages.on_request(
                rid, view.tenant, view.block_hashes, view.block_tokens, floor, ctx_payload, now
            )
        acted = self._conversion(agent, session, now, kept) if self._acted else None
        if self.config.fanout_enabled:
            self._detect_fanout(view, session, agent, floor, now, ctx_payload)
        self.sessions.record_request(session, view, agent, now, floor, ctx_payload)
        self._pending[rid] = (session, session.requests)
        while len(self._pending) > PENDING_PER_SESSION * self.config.max_sessions:
            self._pending.popitem(last=False)
        trigger = self.config.plan_trigger
        if trigger == "auto" and agent is not None and agent.gap_median is not None:
            # the planner would defer every successor to the response end anyway: skip the work
            cfg = self.config
            ts = self.agents.tenant(agent.tenant)
            soon = not Deferred.holds(agent.gap_median, ts.max_anchor_tokens / cfg.prefill_tokens_per_s, cfg)
            if soon or not self.planner.enabled(Deferred.name):  # (the deferral switched off: an ablation)
                self.planner.dirty[session.key] = None
            else:  # planned when the response ends (a skip with a name, like the planner's own)
                self.planner.rec.drop(
                    Deferred.name, "deferred", now, Successors.name, REASON_TRANSITION, agent.agent_id, agent.tenant
                )
        elif trigger != "response":
            self.planner.dirty[session.key] = None
        return ObservedRequest(
            rid,
            agent.agent_id if agent else None,
            view.session_id or session.sid,  # the client's id names its run (hints key on it)
            predicted,
            hit,
            acted[0] if acted else None,
            acted[1] if acted else 0,
            acted[2] if acted else None,
            session.sid,
        )

    def peek_session(self, view: RequestView) -> tuple[str, str] | None:
        """The conversation ``observe_request`` would put ``view`` in (None: a new one), with the
        same session floor, and without learning anything: the proxy asks it before forwarding."""
        if view.is_warmup or not view.block_hashes:
            return None
        agents = self.agents
        agent = agents.lookup(view)
        anchor_len = len(agent.anchor_hashes) if agent else 0
        floor = anchor_len if agent is not None else max(view.anchor_blocks, agents.shared_depth)
        return peek_conversation(
            self.sessions,
            view,
            max(floor - 1, agents.shared_depth) if agent else floor,
            anchor_len if agent else max(view.anchor_blocks, view.header_blocks),
        )

    def _detect_fanout(
        self,
        view: RequestView,
        session: Session,
        agent: Agent | None,
        floor: int,
        now: float,
        ctx_payload: object = None,
    ) -> None:
        """Fan-out: a request of a session whose previous request is still running shares a parent
        prefix with it (parallel tool calls, map steps), or asks for n > 1 choices. The parent,
        beyond the agent's anchor, is what every sibling (and the join after them) reads: the
        planner keeps it (touch / retain, never a warm: the siblings are running on it)."""
        hashes = view.block_hashes
        k = 0
        # still running, or (the live proxy learns a request once the engine accepted it, so a
        # non-streamed sibling is observed after its predecessor ended) ended after this one began
        running = session.inflight > 0 or (session.last_end is not None and session.last_end > now)
        if running and session.hashes:
            prev = session.hashes
            m = min(len(prev), len(hashes))
            while k < m and prev[k] == hashes[k]:
                k += 1
        elif view.n > 1:
            k = len(hashes)
        if k > floor and agent is not None:
            if not self.planner.fanout:
                self._fanout_bytes = 0  # the planner cleared what was parked
            cost = session_bytes(k, ctx_payload)
            if self._fanout_bytes + cost > self.config.fanout_max_bytes:
                self.fanout_dropped += 1
                return
            self._fanout_bytes += cost
            self.fanouts += 1
            self.planner.fanout[session.key] = (agent, hashes[:k], view.block_tokens[:k], ActionPayload(ctx_payload))

    def _conversion(
        self, agent: Agent | None, session: Session, now: float, lineage_key: int | None = None
    ) -> tuple[str, int, int] | None:
        """The executed action (if any) that prepared this request: its context, else its anchor."""
        acted = self._acted
        horizon = now - self.config.conversion_window_s
        if len(acted) > PRUNE_SLACK * self.config.max_agents:
            for k in [k for k, v in acted.items() if v[2] < horizon]:
                del acted[k]
        keys = []
        tenant = session.key[0]
        if session.hashes:
            keys.append((tenant, session.hashes[-1]))  # the session's context
        if lineage_key is not None:
            keys.append((tenant, lineage_key))  # what its text lineage's resume kept
        if agent is not None:
            if session.contexts:  # successor_contexts on: the agent's own earlier context here
                c = self.sessions.context_for(session, agent)
                if c is not None and c.hashes is not session.hashes:
                    keys.append((tenant, c.hashes[-1]))
            keys.append((tenant, agent.key))  # its anchor (key = anchor's last hash)
        for k in keys:
            hit = acted.pop(k, None)
            if hit is not None and hit[2] >= horizon:
                return hit[0], hit[1], k[1]
        return None

    def observe_response(self, request_id: int, outcome: ResponseOutcome, now: float) -> None:
        self.lineages.on_response(request_id, now)
        pending = self._pending.pop(request_id, None)
        if pending is None:
            return  # a warmup, or forgotten (bounded)
        session, seq = pending
        latest = seq == session.requests  # no later request of the session was sent since
        self.sessions.record_response(session, outcome.finish_reason, outcome.assistant_payload, now, latest)
        # a response ending in tool_calls always matters (tool_resume); otherwise it re-plans the
        # successors only when the trigger asks for it (acting just before the demand, so what
        # is warmed has less time to be evicted again)
        if (
            session.finish == "tool_calls" or self.config.plan_trigger != "request"
        ) and session.key in self.sessions.sessions:
            self.planner.dirty[session.key] = None

    # --- outputs -----------------------------------------------------------------------------------
    def plan(self, now: float, load: EngineLoad = NO_LOAD) -> list[Action]:
        return self.planner.plan(now, load)

    def record_action_result(self, action: Action, ok: bool, now: float, computed_tokens: float | None = None) -> None:
        """The executor's verdict. ok=True means the engine ran it: the shadow now holds the blocks.
        ``computed_tokens`` (view tokens the engine prefilled for it, when known) calibrates what a
        touch really costs: the shadow's verdict is coarse at the LRU tail."""
        block_tokens = self.planner.finish(action, ok, computed_tokens)
        if ok and action.kind != "retain" and action.block_hashes:
            self._acted[(action.tenant, action.block_hashes[-1])] = (action.reason, action.tokens, now)
        if ok and action.kind != "retain" and action.block_hashes:
            if block_tokens is None or len(block_tokens) != len(action.block_hashes):
                per = max(1, action.tokens // len(action.block_hashes))
                block_tokens = (per,) * len(action.block_hashes)
            anchor = len(action.block_hashes) if action.reason != "tool_resume" else 0
            self.residency.touch(action.block_hashes, block_tokens, anchor)
            if self.host_residency is not None:
                self.host_residency.touch(action.block_hashes, block_tokens, anchor)

    def engine_truth(self, **measured: float) -> PolicyConfig:
        """Engine facts measured at run time (prefill rate, host-tier price and size, ...) replace
        the matching PolicyConfig fields in the policy and its planner at once (the config is frozen:
        a changed copy is swapped in; the planner re-reads it at every refill). Returns the new one."""
        cfg = self.config.with_overrides(**measured)
        self.config = self.planner.cfg = cfg
        if "host_tier_tokens" in measured:
            self.set_host_tier(cfg.host_tier_tokens)
        return cfg

    def set_host_tier(self, tokens: int) -> None:
        """The engine turned out to keep evicted KV in host memory (or its size changed): model it."""
        cfg = self.config
        if self.host_residency is None:
            self.host_residency = ResidencyShadow(
                int(tokens),
                cfg.near_eviction_fraction,
                cfg.residency_stride,
                cfg.residency_stride_tokens,
                cfg.residency_max_entries,
                cfg.near_eviction_horizon_s,
            )
        else:
            self.host_residency.on_engine_truth(capacity_tokens=int(tokens))
        self.planner.host_residency = self.host_residency

    def stats(self) -> PolicyStats:
        by_tenant: dict[str, float] = {}
        busiest, most = "", -1
        transitions = predictions = hits = 0
        for name, ts in self.agents.tenants.items():
            learner = ts.learner
            by_tenant[name] = learner.predictability()
            transitions += learner.steps
            predictions += learner.predictions
            hits += learner.hits
            if learner.steps > most:
                busiest, most = name, learner.steps
        gate = (
            self.planner.gate_open(self.agents.tenants[busiest], self.planner._now)
            if busiest in self.agents.tenants
            else False
        )
        p = self.planner
        return PolicyStats(
            predictability=by_tenant.get(busiest, 0.0),
            predictability_by_tenant=by_tenant,
            agents=len(self.agents),
            sessions=len(self.sessions),
            transitions=transitions,
            predictions=predictions,
            prediction_hits=hits,
            top1_accuracy=hits / predictions if predictions else 0.0,
            gate_open=gate,
            actions_emitted=dict(p.emitted),
            actions_skipped=dict(p.skipped),
            actions_failed=p.failed,
            budget_tokens=p.bucket,
            inflight_actions=len(p.inflight),
            residency_tokens=self.residency.used_tokens,
            residency_capacity_tokens=self.residency.capacity_tokens,
            sessions_seen=self.sessions.created,
        )

    # --- persistence ---------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, object]:
        cfg = self.config
        return _snapshot.dump(self.agents, self._dormant, cfg.snapshot_max_bytes, cfg.age_lambda)

    def _adopt(self, tenant: str) -> None:
        """A restored salted tenant's traffic is back: install its learned state under its name."""
        saved = self._dormant.pop(_snapshot.tenant_key(tenant), None) if tenant else None
        if saved is not None:
            _snapshot.apply_tenant(self.agents, tenant, saved)

    def restore(self, data: object) -> None:
        """Load learned state (raises ValueError on a foreign/too-large/wrong-version document).
        Live sessions are dropped: they would point at agents that no longer exist."""
        self._dormant = _snapshot.load(self.agents, data, self.config)
        self.sessions = SessionTracker(self.config)
        self.agents.on_evict = self.sessions.forget_agent
        self.planner.sessions = self.sessions
        self.planner.dirty.clear()
        self._pending.clear()
        self.lineages = self.planner.lineages = LineageBook(self.config.gap_samples)
