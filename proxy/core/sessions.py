"""Sessions: which earlier request a new request continues.

Explicit ids win (header X-Session-ID, then ``user``, ``metadata.session_id``,
``prompt_cache_key``; the view carries the first present). Otherwise a request continues the
session whose last prompt its block chain extends: every request indexes the hash of its last
block (and, for globally cut raw/trace prompts, of the block before when the last is partial and
will be re-cut in the follow-up), and a new request walks its own chain backwards looking them up,
so the deepest matching parent wins. Blocks inside the agent's anchor are never session keys:
every request of that agent shares them.

Bounded (``max_sessions``, oldest activity evicted) and TTL-expired; an OrderedDict in activity
order makes both O(1) amortised. Also keeps, per (tenant, current agent), how many live sessions
sit on that agent: the sources of the survival BFS.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .agents import Agent
from .config import PolicyConfig
from .view import RequestView


@dataclass(slots=True, eq=False)
class Session:
    key: tuple[str, str]                 # (tenant, session id)
    agent: Agent | None = None           # agent of the latest request
    last_activity: float = 0.0
    last_request: float = 0.0
    last_end: float | None = None        # end of the latest response (None while the first runs)
    finish: str | None = None
    inflight: int = 0
    requests: int = 0
    hashes: tuple[int, ...] = ()         # latest prompt's chain
    block_tokens: tuple[int, ...] = ()
    context_payload: Any = None
    assistant_payload: Any = None
    inferred: bool = False
    index_keys: tuple = ()

    @property
    def sid(self) -> str:
        return self.key[1]


class SessionTracker:
    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self.sessions: OrderedDict[tuple[str, str], Session] = OrderedDict()
        # last-block hash -> session key (the tenant is checked on the value: chat hashes are
        # already salted per tenant, and a plain int key keeps the backwards walk cheap)
        self._index: dict[int, tuple[str, str]] = {}
        self.on_agent: dict[tuple[str, int], int] = {}       # (tenant, slot) -> live sessions there
        self._inferred_seq = 0
        self._expired_at = float("-inf")
        self.inferred_hits = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def expire(self, now: float) -> None:
        if len(self.sessions) <= self.config.max_sessions and now - self._expired_at < 1.0:
            return                      # TTLs are minutes: a check per second is exact enough
        self._expired_at = now
        horizon = now - self.config.session_ttl_s
        sessions = self.sessions
        while sessions:
            first = next(iter(sessions.values()))
            if first.last_activity >= horizon and len(sessions) <= self.config.max_sessions:
                break
            self._drop(first)

    def _drop(self, s: Session) -> None:
        self.sessions.pop(s.key, None)
        for k in s.index_keys:
            if self._index.get(k) == s.key:
                del self._index[k]
        self._leave_agent(s)

    def _leave_agent(self, s: Session) -> None:
        if s.agent is not None and not s.agent.forgotten:
            k = (s.agent.tenant, s.agent.slot)
            c = self.on_agent.get(k, 0) - 1
            if c > 0:
                self.on_agent[k] = c
            else:
                self.on_agent.pop(k, None)

    def resolve(self, view: RequestView, now: float, anchor_len: int = 0) -> Session:
        """The session ``view`` belongs to (created when new); marks it active.
        ``anchor_len``: blocks of the agent's fixed context, never a session boundary."""
        if len(self.sessions) > self.config.max_sessions or now - self._expired_at >= 1.0:
            self.expire(now)            # (its own early-out, checked here to save the call)
        tenant = view.tenant
        if view.session_id:
            key = (tenant, view.session_id)
            s = self.sessions.get(key)
            inferred = False
        else:
            s = self._infer(view, anchor_len)
            inferred = True
            key = s.key if s is not None else None
            if s is not None:
                self.inferred_hits += 1
        if s is None:
            if key is None:
                self._inferred_seq += 1
                key = (tenant, f"~{self._inferred_seq:x}")
            s = Session(key=key, inferred=inferred)
            self.sessions[key] = s
            if len(self.sessions) > self.config.max_sessions:
                self.expire(now)
        self.sessions.move_to_end(key)
        s.last_activity = now
        return s

    def _infer(self, view: RequestView, anchor_len: int) -> Session | None:
        hashes = view.block_hashes
        index = self._index
        tenant = view.tenant
        stop = max(anchor_len, len(hashes) - self.config.infer_max_lookback)
        get = index.get
        for i in range(len(hashes) - 1, stop - 1, -1):
            key = get(hashes[i])
            if key is not None and key[0] == tenant:
                s = self.sessions.get(key)
                if s is not None:
                    return s
        return None

    def record_request(self, s: Session, view: RequestView, agent: Agent | None, now: float,
                       anchor_len: int = 0) -> None:
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
        s.context_payload = view.context_payload
        s.assistant_payload = None
        for k in s.index_keys:
            if self._index.get(k) == s.key:
                del self._index[k]
        h, t = view.block_hashes, view.block_tokens
        keys: tuple = ()
        n = len(h)
        if n > anchor_len:                  # a prompt that is only the anchor starts no chain
            keys = (h[-1],)
            # globally cut prompts (raw/trace views) re-cut a partial last block in the follow-up
            if view.anchor_blocks == 0 and n - 2 >= anchor_len and t[-1] < t[-2]:
                keys += (h[-2],)
        for k in keys:
            self._index[k] = s.key
        s.index_keys = keys

    def record_response(self, s: Session, finish: str | None, assistant_payload: Any, now: float) -> None:
        s.inflight = max(0, s.inflight - 1)
        s.last_end = now
        s.last_activity = now
        s.finish = finish
        s.assistant_payload = assistant_payload
        if s.key in self.sessions:
            self.sessions.move_to_end(s.key)

    def forget_agent(self, agent: Agent) -> None:
        """An evicted agent: sessions sitting on it no longer have a current agent.

        O(1): its BFS-source count goes now; sessions still pointing at it are cleaned lazily (the
        policy and the planner check ``AgentRegistry.alive`` before using a session's agent, and
        ``_leave_agent`` skips agents that were already forgotten). Scanning every session here made
        agent-less traces (one new "agent" per request) quadratic."""
        self.on_agent.pop((agent.tenant, agent.slot), None)
        agent.forgotten = True
