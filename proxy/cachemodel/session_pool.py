"""SGLang's session radix cache (`--enable-session-radix-cache`) as a block pool.

Why: the replay and the simulated engine must answer "what does SGLang keep when sessions are
tagged and closed" with the engine's own rules, so the proxy's close decisions can be measured
against plain LRU. Semantics modelled (docs/sglang-sessions.md has the citations):

- a request names its session (`session_id`); the first request of an unknown id opens it
  implicitly (`ensure_session_generation`), `/open_session` may open it explicitly;
- when a request *finishes*, its cached chain becomes one of the session's leaves; a leaf that is an
  ancestor of the new one is superseded (`register_session_leaf`: coverage advances), a branch adds
  a leaf. A session covers every block on the path from the root to each of its leaves, and a
  block's reference count is the number of live sessions covering it (`FullComponent` coverage);
- eviction takes free blocks by the key `(refs > 0, refs, base order)`: every unreferenced block
  goes before any referenced one, referenced ones fewest-sessions first, ties by the pool's own
  order (LRU, or SGLang's `priority` policy: lower priority, then least recently used). It is soft
  protection, not pinning: when every free block is referenced, referenced blocks are evicted too
  (`FullComponent._session_ref_eviction_strategy`); blocks a running request holds are never
  evicted (lock_ref);
- evicting a covered block drops it from its sessions' coverage (the leaf falls back to its parent,
  `discard_deleted_session_leaf`);
- `close_session` only dereferences (the v0.5.17 unified cache: "closing a session only
  dereferences its KV"): the session's blocks keep their KV and their hits but drop to the
  unreferenced tier, so they are the next to go. `close_mode="free"` models the first merged
  version (PR #27058, `release_radix_session`): blocks no other live session holds and no request
  holds are reclaimed at once (their slots become empty; later requests miss them);
- a request admitted before its session was closed does not tag (stale generation); a later request
  with the same id opens a new incarnation.

Not modelled: the unified cache's priority classes (`--enable-priority-scheduling` high/low
sessions, adaptive demotion), streaming sessions, the host tier under session refs.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence

from proxy.cachemodel.block_pool import BlockPool

CLOSE_MODES = ("deref", "free")


class SessionPool(BlockPool):
    """`BlockPool` (its `lru` or `priority` base order) with SGLang's session references."""

    def __init__(
        self, capacity_blocks: int, eviction: str = "lru", retention_seconds: float = 300.0, close_mode: str = "deref"
    ):
        super().__init__(capacity_blocks, eviction, retention_seconds)
        if close_mode not in CLOSE_MODES:
            raise ValueError(f"close_mode must be one of {CLOSE_MODES}, got {close_mode!r}")
        self.close_mode = close_mode
        self._pq = None  # the tiered queue below replaces both stock queues
        self._tiers: dict[int, list] = {}  # refs -> heap of (base key, seq, block), lazy
        self._where: dict[Hashable, tuple[int, tuple]] = {}  # free block -> (refs, its entry)
        self._seq = 0
        self._holders: dict[Hashable, set[str]] = {}  # block -> live sessions covering it
        # session -> leaf block -> (its chain, length): a truncated leaf shares its chain (no copy)
        self._leaves: dict[str, dict[Hashable, tuple[tuple, int]]] = {}
        self._gen: dict[str, int] = {}  # live session -> incarnation
        self._incarnation = 0
        self.session_freed = 0  # blocks reclaimed by close (close_mode="free")
        self.closed = 0

    # ------------------------------------------------------------------ sessions
    def open_session(self, session_id: str) -> int:
        """Open (or re-open: a new incarnation, the old one released) a session; its generation."""
        if session_id in self._gen:
            self.close_session(session_id)
        self._incarnation += 1
        self._gen[session_id] = self._incarnation
        return self._incarnation

    def ensure_session(self, session_id: str) -> int:
        """The live generation of a session, opening it implicitly (a request naming it)."""
        gen = self._gen.get(session_id)
        return gen if gen is not None else self.open_session(session_id)

    def live_sessions(self) -> int:
        return len(self._gen)

    def session_blocks(self, session_id: str) -> int:
        """Resident blocks the session covers now."""
        return len(self._covered(session_id))

    def refs(self, block: Hashable) -> int:
        return len(self._holders.get(block, ()))

    def register(self, session_id: str, generation: int, chain: Sequence[Hashable]) -> bool:
        """A request of `session_id` finished with `chain` cached: tag it as the session's leaf.
        Only the resident prefix counts; a stale generation (closed since) does not tag."""
        if self._gen.get(session_id) != generation:
            return False
        n = self.match_prefix(chain)
        if n == 0:
            return False
        path = tuple(chain[:n])
        leaves = self._leaves.setdefault(session_id, {})
        if path[-1] in leaves:
            return True
        before = self._covered(session_id)
        on_path = set(path)
        for leaf in [h for h in leaves if h in on_path]:  # an ancestor leaf: coverage advances
            del leaves[leaf]
        leaves[path[-1]] = (path, n)
        self._recount(session_id, before, self._covered(session_id))
        return True

    def close_session(self, session_id: str) -> bool:
        """`/close_session`: drop the session's references (and, close_mode="free", reclaim the
        blocks nobody else holds). False when the session is unknown or already closed."""
        if self._gen.pop(session_id, None) is None:
            return False
        self.closed += 1
        before = self._covered(session_id)
        self._leaves.pop(session_id, None)
        self._recount(session_id, before, set())
        if self.close_mode == "free":
            for h in before:
                if h in self._ref and self._ref[h] == 0 and not self._holders.get(h):
                    self._remove_free(h)
                    del self._ref[h]
                    self._meta.pop(h, None)
                    self._empty += 1
                    self.session_freed += 1
                    if self.listener is not None:
                        self.listener("removed", [h])
            self.version += 1
        return True

    def _covered(self, session_id: str) -> set:
        out: set = set()
        for path, n in self._leaves.get(session_id, {}).values():
            out.update(path[:n])
        return out

    def _recount(self, session_id: str, before: set, after: set) -> None:
        holders = self._holders
        for h in after - before:
            holders.setdefault(h, set()).add(session_id)
            self._retier(h)
        for h in before - after:
            s = holders.get(h)
            if s is not None:
                s.discard(session_id)
                if not s:
                    del holders[h]
            self._retier(h)

    def _retier(self, h: Hashable) -> None:
        """A free block's reference count changed: move it to its new tier, same base key."""
        w = self._where.get(h)
        if w is None or w[0] == self.refs(h):
            return
        self._where[h] = (self.refs(h), w[1])
        heapq.heappush(self._tiers.setdefault(self.refs(h), []), w[1])

    def _drop_coverage(self, h: Hashable) -> None:
        """An evicted block leaves its sessions' coverage: each leaf through it falls back to the
        part of its chain before it (SGLang `discard_deleted_session_leaf`). The usual victim is a
        leaf's own last block (tails go first): then only that leaf moves up one block."""
        sids = self._holders.pop(h, None)
        for sid in sids or ():
            leaves = self._leaves.get(sid, {})
            leaf = leaves.get(h)
            if leaf is not None and not any(h in p[: k - 1] for key, (p, k) in leaves.items() if key != h):
                path, n = leaves.pop(h)
                if n > 1 and path[n - 2] not in leaves:
                    leaves[path[n - 2]] = (path, n - 1)
                continue
            before = self._covered(sid)
            for key, (path, n) in list(leaves.items()):
                if h in path[:n]:
                    del leaves[key]
                    k = path.index(h)
                    if k > 0 and path[k - 1] not in leaves:
                        leaves[path[k - 1]] = (path, k)
            self._recount(sid, before - {h}, self._covered(sid))

    # ------------------------------------------------------------------ the free queue
    def _base_key(self, h: Hashable, now: float) -> tuple:
        self._seq += 1
        if self.eviction == "lru":
            return (self._seq,)
        prio, last = self._meta.get(h, (0, now))
        prio = self._effective(prio, last, now)
        self._meta[h] = (prio, now)  # finishing counts as an access (SGLang insert)
        return (prio, now, self._seq)

    def _free_len(self) -> int:
        return len(self._where)

    def _push_free(self, key: Hashable, now: float) -> None:
        base = self._base_key(key, now)
        entry = (base, key)
        refs = self.refs(key)
        self._where[key] = (refs, entry)
        heapq.heappush(self._tiers.setdefault(refs, []), entry)

    def _remove_free(self, key: Hashable) -> None:
        del self._where[key]  # its heap entries go stale (lazy)

    def _pop_victim(self, now: float) -> Hashable:
        for refs in sorted(self._tiers):
            heap = self._tiers[refs]
            while heap:
                entry = heapq.heappop(heap)
                key = entry[1]
                w = self._where.get(key)
                if w is not None and w[0] == refs and w[1] is entry:
                    del self._where[key]
                    if key in self._holders:
                        self._drop_coverage(key)
                    return key
            del self._tiers[refs]
        raise IndexError("no free block to evict")

    # ------------------------------------------------------------------ BlockPool overrides
    def access(self, hashes: Sequence[Hashable], now: float, priority: int = 0) -> int:
        return self._access_general(hashes, now, priority)  # the fast paths read the stock queues

    def eviction_order(self, now: float = 0.0) -> list:
        """Free blocks in eviction order (tests and debugging)."""
        live = [(w[0], w[1][0], k) for k, w in self._where.items()]
        return [k for _, _, k in sorted(live, key=lambda x: (x[0] > 0, x[0], x[1]))]

    def reset(self) -> bool:
        if not super().reset():
            return False
        self._tiers.clear()
        self._where.clear()
        self._holders.clear()
        self._leaves.clear()
        return True
