"""Engine truth by session: which of a session's blocks the engine holds, from its KV events.

Why: the residency shadow (residency.py) models the engine's LRU from what the proxy forwards; it is an
estimate, and the planner's question about a paused conversation ("is its context still there, and how
much of it is gone") is where the estimate matters most. vLLM echoes the request's session id on
`BlockStored` (PR #51381: an optional `session_id`, the id of the request that stored the blocks) and
names every eviction in `BlockRemoved`; with the proxy's own session id on every request
(session_tags.py), the events say exactly which blocks each conversation stored and which of them are
gone. Semantics follow vLLM's: a block is attributed to the session whose request stored it (under
vLLM's default `kv_cache_report_mode="incremental"` a block another session reuses is not re-reported,
so a shared prefix counts for the session that stored it first); `BlockRemoved` and `AllBlocksCleared`
carry no session and apply to whichever session holds the block.

Keyed by the engine's session id (an opaque string), with block ids opaque too (the engine's hashes):
the caller maps a conversation to its id (`ResidencyShadow.engine_session_of`). Bounded: at most
`max_blocks` attributed blocks and `max_sessions` sessions, oldest session dropped first. Pure.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class _Entry:
    __slots__ = ("blocks", "evicted_tokens", "resident_tokens")

    def __init__(self) -> None:
        self.blocks: dict[object, int] = {}  # engine block id -> its tokens
        self.resident_tokens = 0
        self.evicted_tokens = 0  # tokens of its blocks removed since it last stored them


class SessionResidency:
    def __init__(self, max_sessions: int = 8192, max_blocks: int = 500_000) -> None:
        self.max_sessions = max(1, int(max_sessions))
        self.max_blocks = max(1, int(max_blocks))
        self._sessions: OrderedDict[str, _Entry] = OrderedDict()
        self._owner: dict[object, str] = {}  # engine block id -> the session that stored it
        self.events = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def stored(self, session: str, blocks: Iterable[object], block_tokens: int) -> None:
        """`BlockStored` with a session id: these blocks (each `block_tokens`) are now resident for it."""
        self.events += 1
        e = self._sessions.get(session)
        if e is None:
            e = self._sessions[session] = _Entry()
            while len(self._sessions) > self.max_sessions:
                self._drop(next(iter(self._sessions)))
        self._sessions.move_to_end(session)
        for b in blocks:
            if b in self._owner or len(self._owner) >= self.max_blocks:
                continue  # stored already (another session's, or a replayed event): first store wins
            self._owner[b] = session
            e.blocks[b] = block_tokens
            e.resident_tokens += block_tokens
        # re-storing after an eviction (a warm, a resume) makes what was evicted resident again;
        # the count of what is still missing restarts from this store
        e.evicted_tokens = 0

    def removed(self, blocks: Iterable[object]) -> int:
        """`BlockRemoved`: whichever session stored these blocks no longer has them. Returns how many
        of them were a session's (0: nothing this book answers changed)."""
        self.events += 1
        hit = 0
        for b in blocks:
            sid = self._owner.pop(b, None)
            if sid is None:
                continue
            e = self._sessions.get(sid)
            if e is None:
                continue
            t = e.blocks.pop(b, 0)
            e.resident_tokens -= t
            e.evicted_tokens += t
            hit += 1
        return hit

    def cleared(self) -> None:
        """`AllBlocksCleared` (or the engine restarted): nothing is resident, nothing is known."""
        self.events += 1
        self._sessions.clear()
        self._owner.clear()

    def _drop(self, session: str) -> None:
        e = self._sessions.pop(session)
        for b in e.blocks:
            if self._owner.get(b) == session:
                del self._owner[b]

    # --- queries ------------------------------------------------------------------------------
    def blocks(self, session: str) -> frozenset[object] | None:
        """The engine blocks `session` stored that are resident now, exactly; None: the engine has
        said nothing about this session (no truth: the caller keeps its estimate)."""
        e = self._sessions.get(session)
        return frozenset(e.blocks) if e is not None else None

    def tokens(self, session: str) -> tuple[int, int] | None:
        """(resident tokens, tokens evicted since its last store) of `session`; None: no truth."""
        e = self._sessions.get(session)
        return (e.resident_tokens, e.evicted_tokens) if e is not None else None
