"""When to close a session in SGLang's session radix cache (`/close_session`).

Why: with `--enable-session-radix-cache` SGLang keeps a live session's KV ahead of everything
unreferenced until the session is closed (docs/sglang-sessions.md). Apps rarely close; a session the
proxy never closes holds its rank forever and crowds out the sessions that will come back. Closing
one that will come back costs its prefix. So the proxy closes a session only when it has reason to
believe the session is over:

- its last response was a plain stop (`finish_reason == "stop"` with no tool calls): the agent
  answered, nothing is waiting on a tool;
- and it has been idle longer than its think time: the `quantile` of the gaps between a plain stop
  and the session's next request, learned per session, else across sessions (bounded samples),
  else `default_idle_s`; clamped to [`min_idle_s`, `max_idle_s`];
- never while a request of the session is in flight, and never after a tool call, a length cut or
  an error (the session is mid-work or its state is unknown).

Pure: explicit `now`, no I/O, bounded memory (`max_sessions` tracked, oldest activity dropped first,
`max_samples` per session and across sessions). The runtime executes what `due()` returns and
reports it back with `closed()`.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field

PLAIN_STOP = "stop"


@dataclass(frozen=True, slots=True)
class CloseParams:
    """How long a plainly-stopped session must stay idle before it is judged finished."""

    quantile: float = 0.95  # of the learned think times (stop -> next request)
    min_samples: int = 4  # a session's own samples needed before they are used (else pooled)
    default_idle_s: float = 300.0  # before anything is learned
    min_idle_s: float = 5.0
    max_idle_s: float = 3600.0
    max_samples: int = 32  # per session, and 8x this across sessions
    max_sessions: int = 8192  # tracked sessions (oldest activity dropped, never closed by us)

    def __post_init__(self) -> None:
        if not 0.0 < self.quantile <= 1.0:
            raise ValueError("quantile must be in (0, 1]")
        if self.min_samples < 1 or self.max_samples < 1 or self.max_sessions < 1:
            raise ValueError("min_samples, max_samples and max_sessions must be >= 1")
        if not 0.0 <= self.min_idle_s <= self.max_idle_s:
            raise ValueError("need 0 <= min_idle_s <= max_idle_s")


@dataclass(slots=True)
class _Track:
    inflight: int = 0
    last_end: float | None = None  # when its last response ended
    plain_stop: bool = False  # that response was a plain stop
    think: deque[float] = field(default_factory=deque)


def quantile(values: list[float], q: float) -> float:
    """The `q` quantile (nearest rank, upper) of a non-empty list."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


class SessionCloser:
    """Tracks sessions' activity and says which ones are due for `/close_session`."""

    def __init__(self, params: CloseParams | None = None) -> None:
        self.params = params if params is not None else CloseParams()
        self._tracks: OrderedDict[str, _Track] = OrderedDict()  # by last activity, oldest first
        self._pooled: deque[float] = deque(maxlen=8 * self.params.max_samples)
        self.dropped = 0  # tracks dropped to stay within max_sessions
        self._pooled_q: float | None = None  # cached quantile of the pooled samples

    def __len__(self) -> int:
        return len(self._tracks)

    def _touch(self, session_id: str) -> _Track:
        t = self._tracks.get(session_id)
        if t is None:
            t = self._tracks[session_id] = _Track()
            while len(self._tracks) > self.params.max_sessions:
                self._tracks.popitem(last=False)
                self.dropped += 1
        else:
            self._tracks.move_to_end(session_id)
        return t

    def on_request(self, session_id: str, now: float) -> None:
        """A request of the session went to the engine; a gap after a plain stop is a think time."""
        t = self._touch(session_id)
        if t.plain_stop and t.last_end is not None and t.inflight == 0:
            gap = max(0.0, now - t.last_end)
            t.think.append(gap)
            if len(t.think) > self.params.max_samples:
                t.think.popleft()
            self._pooled.append(gap)
            self._pooled_q = None
        t.inflight += 1
        t.plain_stop = False

    def on_response(self, session_id: str, finish_reason: str | None, tool_calls: bool, now: float) -> None:
        """A request of the session ended (`finish_reason` None: error or abort)."""
        t = self._touch(session_id)
        t.inflight = max(0, t.inflight - 1)
        t.last_end = now
        t.plain_stop = finish_reason == PLAIN_STOP and not tool_calls

    def idle_limit(self, session_id: str) -> float:
        """How long the session must stay idle after a plain stop before it is judged finished."""
        p = self.params
        t = self._tracks.get(session_id)
        own = list(t.think) if t is not None else []
        if len(own) >= p.min_samples:
            limit = quantile(own, p.quantile)
        elif len(self._pooled) >= p.min_samples:
            if self._pooled_q is None:
                self._pooled_q = quantile(list(self._pooled), p.quantile)
            limit = self._pooled_q
        else:
            limit = p.default_idle_s
        return min(p.max_idle_s, max(p.min_idle_s, limit))

    def finished(self, session_id: str, now: float) -> bool:
        """Whether the session is judged finished at `now`."""
        t = self._tracks.get(session_id)
        if t is None or t.inflight > 0 or not t.plain_stop or t.last_end is None:
            return False
        return now - t.last_end > self.idle_limit(session_id)

    def due(self, now: float, limit: int = 64) -> list[str]:
        """Sessions judged finished at `now` (at most `limit`, longest idle first)."""
        out: list[str] = []
        for sid in self._tracks:  # oldest activity first
            if self.finished(sid, now):
                out.append(sid)
                if len(out) >= limit:
                    break
        return out

    def closed(self, session_id: str) -> None:
        """The runtime closed it: forget its activity (its think times stay in the pooled samples)."""
        self._tracks.pop(session_id, None)

    def next_due(self, now: float) -> float:
        """The earliest time a tracked session could become due (inf: none can yet)."""
        best = float("inf")
        for sid, t in self._tracks.items():
            if t.inflight == 0 and t.plain_stop and t.last_end is not None:
                best = min(best, t.last_end + self.idle_limit(sid))
        return max(best, now) if best != float("inf") else best
