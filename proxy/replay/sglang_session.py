"""`sglang-session`: SGLang's session radix cache driven by the proxy's sessions and close decisions.

The engine runs with `session_radix_cache` on (`proxy/cachemodel/session_pool.py`: a live session's
blocks are evicted after every unreferenced block; `/close_session` drops them back to plain LRU).
Each client request carries the proxy's session for it (the core's session, inferred from the
prompt's lineage, or the trace's id when `use_sessions`), as the SGLang adapter sends it; the
proxy's close rule (`proxy/core/session_close.py`: a plain stop, then idle past the session's learned
think-time quantile; never in flight, never after a tool call) closes sessions at its wakeups.

`sglang-session-noclose` tags the same sessions and never closes one (an app that never calls
`/close_session`): the price of holding every session, for comparison. A trace request's
`finish_reason` None counts as a plain stop (the generated workloads mark only tool calls).
"""

from __future__ import annotations

import math

from proxy.core.policy import ScoutPolicy
from proxy.core.session_close import CloseParams, SessionCloser
from proxy.replay.scout import _ScoutBase, build_config


class SglangSessionPolicy(_ScoutBase):
    name = "sglang-session"
    session_cache = True  # EngineDriver: EngineConfig.session_radix_cache
    closes = True

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.sp = ScoutPolicy(build_config(capacity_blocks, self.block_size, self.settings))
        self.closer = SessionCloser(getattr(self, "close_params", None) or CloseParams())
        self._rid: dict[int, int] = {}
        self._sid: dict[int, str] = {}  # request index -> its engine session, while in flight
        self.inflight = 0
        self._wake = math.inf
        self.closes_sent = 0
        self.closes_refused = 0

    def engine_session(self, i, req, now):
        """The session the request carries to the engine (called before the engine queues it)."""
        obs = self.sp.observe_request(self._view(req), now)
        self._rid[i] = obs.request_id
        self.inflight += 1
        sid = obs.session_id
        if sid is None:
            return None
        self._sid[i] = sid
        self.closer.on_request(sid, now)
        self._wake = self.closer.next_due(-math.inf) if self.closes else math.inf
        return sid

    def on_response(self, i, req, hit_blocks, now):
        self._observe_response(i, req, hit_blocks, now)
        sid = self._sid.pop(i, None)
        if sid is None:
            return
        reason = req.finish_reason or "stop"
        self.closer.on_response(sid, reason, reason == "tool_calls", now)
        self._wake = self.closer.next_due(-math.inf) if self.closes else math.inf

    def next_wakeup(self) -> float:
        return self._wake

    def wakeup(self, now: float) -> None:
        eng = self.driver.engine
        for sid in self.closer.due(now, limit=1 << 30):
            if eng.close_session(sid):
                self.closes_sent += 1
            else:
                self.closes_refused += 1
            self.closer.closed(sid)
        # a session due exactly at `now` by float rounding is taken a microsecond later (never spin)
        self._wake = max(self.closer.next_due(-math.inf), now + 1e-6)

    def extra(self):
        pool = self.driver.engine.sessions
        out = {
            "closes": self.closes_sent,
            "closes_refused": self.closes_refused,
            "live_sessions_at_end": pool.live_sessions() if pool is not None else 0,
            "session_freed_blocks": pool.session_freed if pool is not None else 0,
        }
        return out


class SglangSessionNoClosePolicy(SglangSessionPolicy):
    name = "sglang-session-noclose"
    closes = False
