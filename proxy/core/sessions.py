"""Sessions: which earlier request a new request continues.

A session is a *conversation*, found by continuity; an explicit id (``view.session_id``: a
session header, ``metadata.session_id``, ``prompt_cache_key``, ``user``...) names a *run*, which
may hold many conversations (a LangGraph run's supervisor and its parallel researchers) or be one
constant for a whole app (issue 23). Continuity, deepest first:

- the block chain: every request indexes the hash of its last block (and, for globally cut
  raw/trace prompts, of the block before when the last is partial and will be re-cut in the
  follow-up), and a new request walks its own chain backwards looking them up. Blocks inside the
  agent's anchor are never session keys: every request of that agent shares them;
- the history: every chat request also indexes the last of its ``history_keys`` (the messages after
  its system prompt, by content), and a new request walks its own backwards. In a group chat each
  agent's call is its own instructions then the shared conversation: the chain changes with the
  system message, the history does not, so the conversation continues across agents.

With an id: a request continuing one of the run's conversations joins it (ids never merge across
runs); one continuing none starts a new conversation in the run when it has a history to compare
(a chat view) and the run's latest conversation had one too (a constant ``user`` over concurrent
chats is split, not collapsed); otherwise (block traces, a selector prompt with the history inside
its system message) it joins the run's latest conversation, as the id says. ``run_prev`` tells the
policy the run's previous conversation when a new one starts in it, so a transition is learned
across conversations of one run (supervisor -> researcher). Without an id and without continuity
a request starts a new inferred session.

Bounded in count (``max_sessions``) and in bytes (``session_max_bytes``: each session's hash chain
and kept payloads, estimated on insert by ``session_bytes``), oldest activity evicted first, and
TTL-expired; an OrderedDict in activity order makes all three O(1) amortised. A session dropped for
bytes also lets go of its chain and payloads at once, so a request still pointing at it (the
policy's pending map) does not pin them. Runs (id -> its latest conversation) are bounded by
``max_sessions`` too. Also keeps, per (tenant, current agent), how many live sessions
sit on that agent: the sources of the survival BFS.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from .agents import Agent
from .config import PolicyConfig
from .view import RequestView


@dataclass(frozen=True, slots=True)
class AgentContext:
    """An agent's latest prompt in a session that has since moved on to another agent: where
    that agent's next call in the session starts (its anchor + its view of the session so far).
    Kept only with ``successor_contexts`` > 0 (source successor_contexts)."""

    agent_id: str
    hashes: tuple[int, ...]
    block_tokens: tuple[int, ...]
    context_payload: object
    assistant_payload: Mapping[str, object] | None
    nbytes: int


@dataclass(slots=True, eq=False)
class Session:
    key: tuple[str, str]  # (tenant, session id)
    agent: Agent | None = None  # agent of the latest request
    last_activity: float = 0.0
    last_request: float = 0.0
    last_end: float | None = None  # end of the latest response (None while the first runs)
    finish: str | None = None
    inflight: int = 0
    requests: int = 0
    hashes: tuple[int, ...] = ()  # latest prompt's chain
    block_tokens: tuple[int, ...] = ()
    context_payload: object = None
    assistant_payload: Mapping[str, object] | None = None
    inferred: bool = False
    index_keys: tuple[int, ...] = ()
    run: str | None = None  # the explicit id (run) it belongs to
    chat: bool = False  # its latest request had a history to compare (a chat view)
    nbytes: int = 0  # estimated bytes held (chain + payloads), see session_bytes
    # agent slot -> its latest context here, for agents other than the current one, oldest first
    # (at most PolicyConfig.successor_contexts; None while off or empty); bytes in ctx_bytes
    contexts: dict[int, AgentContext] | None = None
    ctx_bytes: int = 0

    @property
    def sid(self) -> str:
        return self.key[1]


# Estimated bytes per block of a kept chain: a tuple slot plus a 64-bit int object (hashes), and a
# tuple slot for the (cached small int) token count.
HASH_BYTES = 48
TOKEN_BYTES = 8


def payload_bytes(payload: object) -> int:
    """Bytes a kept payload holds: its own ``nbytes`` (compact payloads declare it), the length of
    bytes/str, a dict's top-level strings, else 0 (an opaque object shared by many requests, e.g.
    the replay's). Estimated, not walked: this runs on every request."""
    if payload is None:
        return 0
    n = getattr(payload, "nbytes", None)
    if isinstance(n, int):
        return n
    if isinstance(payload, (bytes, bytearray, str)):
        return len(payload)
    if isinstance(payload, dict):  # e.g. an assistant turn: its top-level strings (no walk)
        return sum(len(v) for v in payload.values() if isinstance(v, str))
    return 0


def session_bytes(n_blocks: int, *payloads: object) -> int:
    return n_blocks * (HASH_BYTES + TOKEN_BYTES) + sum(payload_bytes(p) for p in payloads)


def common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Blocks two chained-hash chains share (equal at i means equal before i: a binary search)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[mid - 1] == b[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class SessionTracker:
    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self.sessions: OrderedDict[tuple[str, str], Session] = OrderedDict()
        # last-block hash -> session key (the tenant is checked on the value: chat hashes are
        # already salted per tenant, and a plain int key keeps the backwards walk cheap)
        self._index: dict[int, tuple[str, str]] = {}
        self.on_agent: dict[tuple[str, int], int] = {}  # (tenant, slot) -> live sessions there
        self._inferred_seq = 0
        self._expired_at = float("-inf")
        self.inferred_hits = 0
        self.bytes = 0  # sum of the sessions' nbytes
        self.dropped_for_bytes = 0  # sessions dropped to stay within session_max_bytes
        self.created = 0  # sessions ever created ("sessions seen")
        # (tenant, id) -> (the run's latest conversation, conversations started in it)
        self._runs: OrderedDict[tuple[str, str], tuple[tuple[str, str], int]] = OrderedDict()
        self.run_prev: Session | None = None  # set by resolve: see the module docstring
        self.run_splits = 0  # conversations started inside an existing run

    def __len__(self) -> int:
        return len(self.sessions)

    def expire(self, now: float) -> None:
        if len(self.sessions) <= self.config.max_sessions and now - self._expired_at < 1.0:
            return  # TTLs are minutes: a check per second is exact enough
        self._expired_at = now
        horizon = now - self.config.session_ttl_s
        sessions = self.sessions
        while sessions:
            first = next(iter(sessions.values()))
            if first.last_activity >= horizon and len(sessions) <= self.config.max_sessions:
                break
            self._drop(first)

    def _drop(self, s: Session) -> None:
        if self.sessions.pop(s.key, None) is not None:
            self.bytes -= s.nbytes
        s.nbytes = 0
        self._strip(s)
        self._leave_agent(s)

    def _leave_agent(self, s: Session) -> None:
        if s.agent is not None and not s.agent.forgotten:
            k = (s.agent.tenant, s.agent.slot)
            c = self.on_agent.get(k, 0) - 1
            if c > 0:
                self.on_agent[k] = c
            else:
                self.on_agent.pop(k, None)

    def resolve(self, view: RequestView, now: float, anchor_len: int = 0, agent_len: int | None = None) -> Session:
        """The session ``view`` belongs to (created when new); marks it active.
        ``anchor_len``: blocks of the agent's fixed context, never a session boundary.
        ``agent_len``: blocks of the agent's own anchor (default ``anchor_len``): a request of a run
        that shares more than that with the run's latest conversation (a fan-out sibling, a task's
        re-rendered call) is that conversation's, not a new one."""
        if len(self.sessions) > self.config.max_sessions or now - self._expired_at >= 1.0:
            self.expire(now)  # (its own early-out, checked here to save the call)
        tenant = view.tenant
        rid = view.session_id
        self.run_prev = None
        s = self._infer(view, anchor_len)
        key: tuple[str, str] | None = None
        if rid:
            if s is not None and s.run != rid:
                s = None  # another run's conversation: ids never merge
            if s is None:
                rkey = (tenant, rid)
                run = self._runs.get(rkey)
                latest = self.sessions.get(run[0]) if run is not None else None
                if latest is None:
                    s = self.sessions.get(rkey)  # (no run kept: the id's own session, if any)
                    key = rkey
                elif (
                    view.history_keys
                    and latest.chat
                    and common_prefix(view.block_hashes, latest.hashes)
                    <= (anchor_len if agent_len is None else agent_len)
                ):  # a new conversation in the run
                    self.run_prev = latest
                    self.run_splits += 1
                    key = (tenant, f"{rid}~{run[1] + 1:x}")  # type: ignore[index]
                    while key in self.sessions:
                        key = (tenant, key[1] + "~")
                else:
                    s = latest
        elif s is not None:
            self.inferred_hits += 1
        if s is None:
            if key is None:
                self._inferred_seq += 1
                key = (tenant, f"~{self._inferred_seq:x}")
            s = Session(key=key, inferred=not rid, run=rid)
            self.sessions[key] = s
            self.created += 1
            if rid:
                run = self._runs.get((tenant, rid))
                self._runs[(tenant, rid)] = (key, run[1] + 1 if run is not None else 1)
                if len(self._runs) > self.config.max_sessions:
                    self._runs.popitem(last=False)
            if len(self.sessions) > self.config.max_sessions:
                self.expire(now)
        elif rid:
            run = self._runs.get((tenant, rid))
            self._runs[(tenant, rid)] = (s.key, run[1] if run is not None else 1)
        if rid:
            self._runs.move_to_end((tenant, rid))
        self.sessions.move_to_end(s.key)
        s.last_activity = now
        return s

    def run_key(self, tenant: str, sid: str) -> tuple[str, str] | None:
        """The session an explicit id names today (hints, the session lane): its run's latest
        conversation, else the session keyed by the id itself (None: neither is tracked)."""
        run = self._runs.get((tenant, sid))
        if run is not None and run[0] in self.sessions:
            return run[0]
        return (tenant, sid) if (tenant, sid) in self.sessions else None

    def _infer(self, view: RequestView, anchor_len: int) -> Session | None:
        hashes = view.block_hashes
        index = self._index
        tenant = view.tenant
        stop = max(anchor_len, len(hashes) - self.config.infer_max_lookback)
        get = index.get
        sessions = self.sessions
        for i in range(len(hashes) - 1, stop - 1, -1):
            key = get(hashes[i])
            if key is not None and key[0] == tenant:
                s = sessions.get(key)
                if s is not None:
                    return s
        hist = view.history_keys
        for i in range(len(hist) - 1, max(0, len(hist) - self.config.infer_max_lookback) - 1, -1):
            key = get(hist[i])
            if key is not None and key[0] == tenant:
                s = sessions.get(key)
                if s is not None:
                    return s
        return None

    def record_request(
        self,
        s: Session,
        view: RequestView,
        agent: Agent | None,
        now: float,
        anchor_len: int = 0,
        context_payload: object = None,
    ) -> None:
        if self.config.successor_contexts > 0:
            self._keep_context(s, agent)
        if agent is not s.agent:
            self._leave_agent(s)
            if agent is not None:
                k = (agent.tenant, agent.slot)
                self.on_agent[k] = self.on_agent.get(k, 0) + 1
            s.agent = agent
        s.last_request = now
        s.inflight += 1
        s.requests += 1
        s.hashes = view.block_hashes
        s.block_tokens = view.block_tokens
        s.context_payload = view.context_payload if context_payload is None else context_payload
        s.assistant_payload = None
        for old in s.index_keys:
            if self._index.get(old) == s.key:
                del self._index[old]
        h, t = view.block_hashes, view.block_tokens
        keys: tuple[int, ...] = ()
        n = len(h)
        if n > anchor_len:  # a prompt that is only the anchor starts no chain
            keys = (h[-1],)
            # globally cut prompts (raw/trace views) re-cut a partial last block in the follow-up
            if view.anchor_blocks == 0 and n - 2 >= anchor_len and t[-1] < t[-2]:
                keys += (h[-2],)
        if view.history_keys:
            keys += (view.history_keys[-1],)
        s.chat = bool(view.history_keys)
        for new in keys:
            self._index[new] = s.key
        s.index_keys = keys
        self._charge(s, session_bytes(len(h), s.context_payload) + s.ctx_bytes)

    def _keep_context(self, s: Session, agent: Agent | None) -> None:
        """Before ``s`` moves to ``agent``'s request: keep the previous agent's context (its next
        call here extends it), and drop ``agent``'s kept one (the session now holds it)."""
        ctx = s.contexts
        prev = s.agent
        if agent is not None and ctx is not None:
            old = ctx.pop(agent.slot, None)
            if old is not None:
                s.ctx_bytes -= old.nbytes
        if prev is None or prev is agent or prev.forgotten or not s.hashes:
            return
        if ctx is None:
            ctx = s.contexts = {}
        old = ctx.pop(prev.slot, None)
        if old is not None:
            s.ctx_bytes -= old.nbytes
        n = session_bytes(len(s.hashes), s.context_payload, s.assistant_payload)
        ctx[prev.slot] = AgentContext(
            prev.agent_id, s.hashes, s.block_tokens, s.context_payload, s.assistant_payload, n
        )
        s.ctx_bytes += n
        while len(ctx) > self.config.successor_contexts:
            s.ctx_bytes -= ctx.pop(next(iter(ctx))).nbytes

    def context_for(self, s: Session, agent: Agent) -> AgentContext | None:
        """``agent``'s latest context in ``s`` (the current agent's: the session's own), or None."""
        if agent is s.agent:
            if not s.hashes:
                return None
            return AgentContext(agent.agent_id, s.hashes, s.block_tokens, s.context_payload, s.assistant_payload, 0)
        c = s.contexts.get(agent.slot) if s.contexts else None
        return c if c is not None and c.agent_id == agent.agent_id else None

    def record_response(
        self, s: Session, finish: str | None, answer: Mapping[str, object] | None, now: float, latest: bool = True
    ) -> None:
        """``latest``: the session's latest request ended (an earlier one only leaves the flight)."""
        s.inflight = max(0, s.inflight - 1)
        s.last_activity = now
        if latest:  # the pause, its finish and answer are the latest request's (issue 21)
            s.last_end, s.finish, s.assistant_payload = now, finish, answer
        if s.key in self.sessions:
            self.sessions.move_to_end(s.key)
            self._charge(s, session_bytes(len(s.hashes), s.context_payload, s.assistant_payload) + s.ctx_bytes)

    def _charge(self, s: Session, nbytes: int) -> None:
        """Account ``s`` at ``nbytes`` and drop the least recently active other sessions until the
        tracker fits ``session_max_bytes``; a session larger than the whole budget keeps only its
        metadata (no chain, no payload), so it still counts requests but can never be acted on."""
        if self.sessions.get(s.key) is not s:  # dropped meanwhile (a response arriving late)
            return
        limit = self.config.session_max_bytes
        if nbytes > limit:
            self._strip(s)
            nbytes = 0
        self.bytes += nbytes - s.nbytes
        s.nbytes = nbytes
        if self.bytes <= limit:
            return
        sessions = self.sessions
        while self.bytes > limit and sessions:
            victim = next(iter(sessions.values()))  # activity order: oldest first
            if victim is s:  # s was just made the most recent: it is alone
                break
            self._drop(victim)
            self.dropped_for_bytes += 1

    def _strip(self, s: Session) -> None:
        for k in s.index_keys:
            if self._index.get(k) == s.key:
                del self._index[k]
        s.index_keys = ()
        s.hashes = ()
        s.block_tokens = ()
        s.context_payload = None
        s.assistant_payload = None
        s.contexts = None
        s.ctx_bytes = 0

    def forget_agent(self, agent: Agent) -> None:
        """An evicted agent: sessions sitting on it no longer have a current agent.

        O(1): its BFS-source count goes now; sessions still pointing at it are cleaned lazily (the
        policy and the planner check ``AgentRegistry.alive`` before using a session's agent, and
        ``_leave_agent`` skips agents that were already forgotten). Scanning every session here made
        agent-less traces (one new "agent" per request) quadratic."""
        self.on_agent.pop((agent.tenant, agent.slot), None)
        agent.forgotten = True
