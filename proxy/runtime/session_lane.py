"""The opt-in session lane: an engine `priority` on forwarded client requests that carry none.

Why: an agent's calls form one job. Ordered call by call (FCFS), a session that is mid-task waits
behind sessions that just started, and its KV is evicted while it waits on a tool. Ordered as a
program (Continuum, arXiv 2511.02230: program-level FCFS; Autellix, arXiv 2502.13965: program-level
least attained service) it finishes sooner and keeps its cache. From outside the engine the request
`priority` is the lever, and only an engine that schedules by priority reads it (vLLM
`--scheduling-policy priority`, SGLang `--enable-priority-scheduling`): the lane is active only
while the adapter reports that capability (`engines.base.CAP_SCHED_PRIORITY`).

Ranks are virtual times in ticks of `PRIORITY_TICK_S` since the proxy started (0 = most urgent;
`HttpEngineAdapter.engine_priority` maps them to the engine's sign, below the slack lane):
- `continue`: the session's first-seen time, but never more than `ageing_s` before the arrival. A
  session's later calls go before the calls of sessions that started after it, and a new session's
  first call is ordered behind at most `ageing_s` seconds of later arrivals (the ageing bound). Without
  the bound, an overloaded engine starved new sessions: on the replay grid's cache ×1 cells at busy
  0.7–0.9 their first-call p99 TTFT grew by up to +10,582% (docs/results/replay-lanes-cells.md).
- `las`: the arrival time plus a penalty that grows with the tokens the session was served so far
  (prompt tokens computed + output tokens), doubling thresholds from `LAS_QUANTUM_TOKENS`, in
  `LAS_LEVELS` steps up to `ageing_s`. A request is ordered behind at most `ageing_s` seconds of later
  arrivals: nothing starves longer than that (the same ageing bound).
A client's own `priority` is never touched; requests the proxy cannot attribute to a session get
their arrival time (FCFS among themselves and with the lane). State is bounded (`max_sessions`,
oldest first) and forgets a session idle for `SESSION_TTL_S`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

MODES = ("off", "continue", "las")
PRIORITY_TICK_S = 0.1  # one priority unit = 100 ms of virtual time
LAS_QUANTUM_TOKENS = 1024  # level 1 after this many tokens served, level k after (2^k - 1) quanta
LAS_LEVELS = 8  # levels up to the ageing bound (level 8: ~255k tokens served)
SESSION_TTL_S = 900.0  # a session idle this long starts over
MAX_SESSIONS = 8192


@dataclass(slots=True)
class _Entry:
    first_seen: float
    attained: int = 0
    last: float = 0.0


class SessionLane:
    """Per-session ranks for `continue` / `las`. Pure bookkeeping: the caller passes `now`."""

    def __init__(self, mode: str, ageing_s: float, origin: float, max_sessions: int = MAX_SESSIONS) -> None:
        if mode not in MODES or mode == "off":
            raise ValueError(f"session lane mode {mode!r}: expected continue or las")
        self.mode = mode
        self.ageing_s = float(ageing_s)
        self.origin = float(origin)
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self.counts = {"ranked": 0, "ranked_new": 0, "kept_client_priority": 0, "inactive": 0}

    def __len__(self) -> int:
        return len(self._sessions)

    def _entry(self, key: tuple[str, str] | None, now: float) -> _Entry | None:
        if key is None:
            return None
        e = self._sessions.get(key)
        if e is not None and now - e.last > SESSION_TTL_S:
            del self._sessions[key]
            return None
        return e

    def penalty_s(self, attained: int) -> float:
        """`las`: seconds of later arrivals a session with `attained` tokens served lets go first."""
        level = min(LAS_LEVELS, (1 + max(0, attained) // LAS_QUANTUM_TOKENS).bit_length() - 1)
        return self.ageing_s * level / LAS_LEVELS

    def rank(self, key: tuple[str, str] | None, now: float) -> int:
        """The rank of a request of session `key` (None: not attributable) arriving at `now`."""
        e = self._entry(key, now)
        self.counts["ranked"] += 1
        if e is None:
            self.counts["ranked_new"] += 1
        if self.mode == "continue":
            t = max(e.first_seen, now - self.ageing_s) if e is not None else now
        else:
            t = now + self.penalty_s(e.attained if e is not None else 0)
        return max(0, int((t - self.origin) / PRIORITY_TICK_S))

    def served(self, key: tuple[str, str], tokens: int, started: float, now: float) -> None:
        """A response of session `key` ended: `tokens` served (computed prompt + output)."""
        e = self._entry(key, now)
        if e is None:
            e = self._sessions[key] = _Entry(first_seen=started)
        e.attained += max(0, int(tokens))
        e.last = now
        self._sessions.move_to_end(key)
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)

    def info(self) -> dict[str, object]:
        return {"mode": self.mode, "ageing_s": self.ageing_s, "sessions": len(self._sessions), **self.counts}
