"""Checks of runtime hints against the traffic: every hint that claims something about what will
arrive waits here until a request confirms or refutes it, or its deadline passes.

Each ``Watch`` holds one ``Check`` of the TrustBook, filed under the session id it is about (a
fan-out's also under each branch id). ``observe`` settles the watches of a session when one of its
requests arrives; ``expire`` settles those whose deadline passed: what never arrived refutes (an
ended session that stayed away confirms). Pure: explicit ``now``; bounded by the TrustBook's
``max_pending``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from .hints import FANOUT, NEXT_AGENT, SESSION_ENDED, TOOL_FINISHED, TOOL_STARTED, Check, TrustBook

DURATION = "tool_duration"  # the prediction half of a tool_started (its expected duration)


@dataclass(slots=True)
class Watch:
    check: Check
    fanout_left: int = 0
    fanout_total: int = 0
    fanout_ids: frozenset[str] = frozenset()
    agent_name: str | None = None
    agent_id: str | None = None
    arrived: int = 0


class CheckBook:
    def __init__(self, trust: TrustBook) -> None:
        self.trust = trust
        self.watches: dict[str, list[Watch]] = {}  # session id -> checks
        self._deadlines: list[tuple[float, int, str, Watch]] = []
        self._seq = 0

    def watch(
        self,
        sid: str | None,
        source: str,
        kind: str,
        cls: str,
        now: float,
        deadline: float,
        tokens: int,
        expected_at: float | None = None,
    ) -> Watch | None:
        """Await the check of a hint about session ``sid``; None when it cannot be checked."""
        if not sid:
            return None
        exposed = kind not in (SESSION_ENDED, DURATION)
        check = self.trust.open_check(source, kind, cls, now, deadline, tokens, expected_at, exposed)
        if check is None:
            return None
        w = Watch(check)
        self.watches.setdefault(sid, []).append(w)
        self._seq += 1
        heapq.heappush(self._deadlines, (deadline, self._seq, sid, w))
        return w

    def alias(self, sid: str, w: Watch) -> None:
        """Also settle ``w`` by requests of session ``sid`` (a fan-out's branch ids)."""
        self.watches.setdefault(sid, []).append(w)

    def due(self, now: float) -> bool:
        return bool(self._deadlines) and self._deadlines[0][0] < now

    def observe(self, session_id: str, agent_id: str | None, agent_name: str | None, now: float) -> list[Watch]:
        """A request of ``session_id`` arrived: settle its watches. Returns the fan-outs completed."""
        done: list[Watch] = []
        watches = self.watches.get(session_id)
        if not watches:
            return done
        keep = []
        trust = self.trust
        for w in watches:
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
                    keep.append(w)
                    continue
                trust.close(c, 1.0, now, now - c.issued)
                done.append(w)
            c.deadline = -1.0  # closed: the deadline sweep skips it
        if keep:
            self.watches[session_id] = keep
        else:
            self.watches.pop(session_id, None)

        return done

    def close_duration(self, sid: str | None, now: float) -> None:
        for w in self.watches.get(sid or "", ()):
            if w.check.kind == DURATION and w.check.deadline >= now:
                self.trust.close(w.check, self.trust.duration_score(w.check, now), now, now - w.check.issued)
                w.check.deadline = -1.0

    def expire(self, now: float) -> None:
        """Settle checks whose deadline passed: what never arrived refutes (an ended session that
        stayed away confirms)."""
        dl = self._deadlines
        while dl and dl[0][0] < now:
            _, _, sid, w = heapq.heappop(dl)
            c = w.check
            if c.deadline < 0:
                continue  # closed by traffic already
            if c.kind == SESSION_ENDED:
                self.trust.close(c, 1.0, now)
            elif c.kind == FANOUT:
                self.trust.close(c, w.arrived / max(1, w.fanout_total), now)
            else:
                self.trust.close(c, 0.0, now)
            c.deadline = -1.0
            lst = self.watches.get(sid)
            if lst is not None:
                lst = [x for x in lst if x.check.deadline >= 0]
                if lst:
                    self.watches[sid] = lst
                else:
                    self.watches.pop(sid, None)
            for bid in w.fanout_ids:
                blst = [x for x in self.watches.get(bid, ()) if x is not w]
                if blst:
                    self.watches[bid] = blst
                else:
                    self.watches.pop(bid, None)
