"""Checks of runtime hints against the traffic: every hint that claims something about what will
arrive waits here until a request confirms or refutes it, or its deadline passes.

Each ``Watch`` holds one ``Check`` of the TrustBook, filed under the scoped session it is about —
``(tenant, principal, session id)``, so only the caller's own traffic settles it (a fan-out's also
under each branch id). ``observe`` settles the watches of a session when one of its requests
arrives; ``expire`` settles those whose deadline passed: what never arrived refutes (an ended
session that stayed away confirms).

Bounds (issue 22): at most ``max_checks_per_source`` open checks per source, ``max_pending`` in all,
and ``checks_max_bytes`` of watches (each charged its strings and objects, refunded exactly when it
leaves the deadline heap). Over the byte budget the oldest check of the lowest-standing source
goes first; a check dropped that way, or with its forgotten source, is closed as refuted — a hint
that cannot be checked never counts in its source's favour, so the N + 16 bound on a liar holds
under any flood. A hint whose check cannot be opened does not drive actions (the driver ignores
it). The open-check counts (``pending``, each source's ``unchecked``) are recomputed from the
watches on every deadline sweep, not only decremented. Pure: explicit ``now``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from .hint_tables import OBJECT_BYTES, key_bytes, str_bytes
from .hint_trust import TrustBook
from .hints import FACT, FANOUT, NEXT_AGENT, SESSION_ENDED, TOOL_FINISHED, TOOL_STARTED, Check

DURATION = "tool_duration"  # the prediction half of a tool_started (its expected duration)
Key = tuple[str, str, str]  # (tenant, principal, session id)
HEAP_ENTRY_BYTES = 120  # one deadline-heap tuple and its list slot
WATCH_BYTES = 2 * OBJECT_BYTES + 80  # a Watch, its Check, and the list slots that file it
DEAD_BYTES = HEAP_ENTRY_BYTES + WATCH_BYTES  # a settled watch still in the heap (its strings freed)
VICTIM_REFRESH = 256  # drops before the lowest-standing source is looked up again


@dataclass(slots=True, eq=False)
class Watch:
    check: Check
    keys: tuple[Key, ...] = ()  # every session it is filed under (the first is the hint's own)
    size: int = 0  # its byte charge
    fanout_left: int = 0
    fanout_total: int = 0
    fanout_ids: frozenset[str] = frozenset()
    agent_name: str | None = None
    agent_id: str | None = None
    arrived: int = 0


def watch_bytes(key: Key, branch_keys: int = 0, branch_chars: int = 0, agent: str | None = None) -> int:
    """A watch's charge: its objects, its keys (a fan-out's branch ids twice: the key and the id
    set), and an agent name."""
    return (
        WATCH_BYTES
        + HEAP_ENTRY_BYTES
        + key_bytes(key)
        + branch_keys * (2 * 64 + 3 * 8 + 80)
        + 2 * branch_chars
        + 2 * str_bytes(agent)
    )


class CheckBook:
    def __init__(self, trust: TrustBook) -> None:
        self.trust = trust
        trust.on_forget = self.drop_source
        self.watches: dict[Key, dict[Watch, None]] = {}  # scoped session -> open checks
        self.by_source: dict[str, dict[Watch, None]] = {}  # source -> its open checks, oldest first
        self._deadlines: list[tuple[float, int, Watch]] = []
        self._seq = 0
        self.bytes = 0  # charged: open watches in full, settled ones still in the heap at DEAD_BYTES
        self._dead = 0  # settled watches still in the heap
        self.dropped = 0  # checks dropped under the byte budget or with their source (refuted)
        self._victim: str | None = None  # cached lowest-standing source (see _room)
        self._victim_uses = 0

    # --- opening ---------------------------------------------------------------------------------------
    def watch(
        self,
        key: Key | None,
        source: str,
        kind: str,
        cls: str,
        now: float,
        deadline: float,
        tokens: int,
        expected_at: float | None = None,
        branch_ids: tuple[str, ...] = (),
        agent_name: str | None = None,
    ) -> Watch | None:
        """Await the check of a hint about the scoped session ``key``; None when it cannot be
        checked (no session, the source's or the book's bounds reached)."""
        if key is None or not key[2]:
            return None
        cfg = self.trust.cfg
        mine = self.by_source.get(source)
        if mine is not None and len(mine) >= cfg.max_checks_per_source:
            return None
        size = watch_bytes(key, len(branch_ids), sum(len(b) for b in branch_ids), agent_name)
        if not self._room(source, size):
            return None
        exposed = kind not in (SESSION_ENDED, DURATION)
        check = self.trust.open_check(source, kind, cls, now, deadline, tokens, expected_at, exposed)
        if check is None:
            return None
        keys = (key, *((key[0], key[1], b) for b in branch_ids if b != key[2]))
        w = Watch(check, keys, size, agent_name=agent_name)
        for k in keys:
            self.watches.setdefault(k, {})[w] = None
        self.by_source.setdefault(source, {})[w] = None
        self._seq += 1
        heapq.heappush(self._deadlines, (deadline, self._seq, w))
        self.bytes += size
        self.trust.pending += 1
        return w

    def _room(self, source: str, size: int) -> bool:
        """Make room for ``size`` bytes / one more check: drop the oldest checks of the source with
        the lowest standing, if below this one's; False when only equal or better ones would have
        to go. The victim is looked up again every ``VICTIM_REFRESH`` drops (O(sources) each)."""
        cfg = self.trust.cfg
        if size > cfg.checks_max_bytes:
            return False
        trust = self.trust
        while self.bytes + size > cfg.checks_max_bytes or trust.pending >= cfg.max_pending:
            if self._dead and self._dead * DEAD_BYTES * 8 > cfg.checks_max_bytes:
                self._compact()
                continue
            victim = self._victim
            if victim not in self.by_source or self._victim_uses >= VICTIM_REFRESH:
                victim = min(self.by_source, key=lambda s: trust.weight(s, FACT), default=None)
                self._victim, self._victim_uses = victim, 0
            if victim is None or victim == source or trust.weight(victim, FACT) >= trust.weight(source, FACT):
                return False
            self._victim_uses += 1
            self._drop(next(iter(self.by_source[victim])), 0.0)
        return True

    # --- settling --------------------------------------------------------------------------------------
    def _settle(self, w: Watch, in_heap: bool = True) -> None:
        """``w`` is closed: out of the session lists and its source's list (the heap entry goes
        on the next sweep or compaction, and its bytes with it)."""
        c = w.check
        c.deadline = -1.0
        for k in w.keys:
            lst = self.watches.get(k)
            if lst is None:
                continue
            lst.pop(w, None)
            if not lst:
                del self.watches[k]
        mine = self.by_source.get(c.source)
        if mine is not None:
            mine.pop(w, None)
            if not mine:
                del self.by_source[c.source]
        self.trust.release(c)
        self.trust.pending = max(0, self.trust.pending - 1)
        w.keys, w.fanout_ids, w.agent_name = (), frozenset(), None
        if not in_heap:  # popped by the sweep: nothing of it stays
            self.bytes -= w.size
            return
        self.bytes -= w.size - DEAD_BYTES  # its strings and keys go now; the heap entry stays
        w.size = DEAD_BYTES
        self._dead += 1
        if self._dead > self.trust.pending + 64:
            self._compact()

    def _drop(self, w: Watch, score: float) -> None:
        self.dropped += 1
        self.trust.close(w.check, score, w.check.issued)
        self._settle(w)

    def drop_source(self, source: str) -> None:
        """A forgotten source's checks go with it (the TrustBook's ``on_forget``)."""
        for w in list(self.by_source.get(source, ())):
            self.dropped += 1
            self._settle(w)

    def _compact(self) -> bool:
        """Rebuild the heap without closed watches; refund their bytes. True if it freed any."""
        dl = self._deadlines
        live = [e for e in dl if e[2].check.deadline >= 0]
        self._dead = 0
        if len(live) == len(dl):
            return False
        heapq.heapify(live)
        self._deadlines = live
        self.bytes = sum(e[2].size for e in live)
        return True

    def due(self, now: float) -> bool:
        return bool(self._deadlines) and self._deadlines[0][0] < now

    def observe(self, key: Key, agent_id: str | None, agent_name: str | None, now: float) -> list[Watch]:
        """A request of the scoped session ``key`` arrived: settle its watches. Returns the
        fan-outs completed."""
        done: list[Watch] = []
        watches = self.watches.get(key)
        if not watches:
            return done
        trust = self.trust
        for w in list(watches):
            c = w.check
            if c.deadline < now:
                continue  # expired: settled by the deadline sweep
            if c.kind == SESSION_ENDED:
                trust.close(c, 0.0, now)  # it came back: the "fact" was false
            elif c.kind in (TOOL_STARTED, TOOL_FINISHED):
                trust.close(c, 1.0, now, now - c.issued)
            elif c.kind == DURATION:
                trust.close(c, trust.duration_score(c, now), now, now - c.issued)
            elif c.kind == NEXT_AGENT:
                right = (agent_id is not None and agent_id == w.agent_id) or (
                    agent_name is not None and agent_name == w.agent_name
                )
                trust.close(c, 1.0 if right else 0.0, now, now - c.issued)
            elif c.kind == FANOUT:
                w.arrived += 1
                w.fanout_left -= 1
                if w.fanout_left > 0:
                    continue
                trust.close(c, 1.0, now, now - c.issued)
                done.append(w)
            self._settle(w)
        return done

    def close_duration(self, key: Key | None, now: float) -> None:
        for w in list(self.watches.get(key, ()) if key is not None else ()):
            if w.check.kind == DURATION and w.check.deadline >= now:
                self.trust.close(w.check, self.trust.duration_score(w.check, now), now, now - w.check.issued)
                self._settle(w)

    def expire(self, now: float) -> None:
        """Settle checks whose deadline passed: what never arrived refutes (an ended session that
        stayed away confirms). Then recount what is open."""
        while self._deadlines and self._deadlines[0][0] < now:
            _, _, w = heapq.heappop(self._deadlines)
            c = w.check
            if c.deadline < 0:
                self.bytes -= w.size
                self._dead = max(0, self._dead - 1)
                continue  # closed by traffic already
            if c.kind == SESSION_ENDED:
                self.trust.close(c, 1.0, now)
            elif c.kind == FANOUT:
                self.trust.close(c, w.arrived / max(1, w.fanout_total), now)
            else:
                self.trust.close(c, 0.0, now)
            self._settle(w, in_heap=False)
        self.recount()

    def recount(self) -> int:
        """Recompute the open-check counts and the byte charge from the watches themselves."""
        sources = self.trust.sources
        for rec in sources.values():
            rec.unchecked = rec.checks = 0
        total = 0
        for sid, lst in self.by_source.items():
            total += len(lst)
            hit = sources.get(sid)
            if hit is not None:
                hit.checks = len(lst)
                hit.unchecked = sum(1 for w in lst if w.check.exposed)
        self.trust.pending = total
        self.bytes = sum(e[2].size for e in self._deadlines)
        self._dead = sum(1 for e in self._deadlines if e[2].check.deadline < 0)
        return total
