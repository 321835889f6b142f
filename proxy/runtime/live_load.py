"""The engine's load as the live planner sees it: the proxy's own requests in flight, those still in
prefill, the running set, and the engine's scraped queue and busy share.

Why apart from the hooks (`live_policy.py`): this is the one input that decides whether an action
may run now (a warm never queues in front of a client prefill: core economics' slack and calm, and
its price charges every client it slows), and what counts as "in prefill" is a rule of its own — a
streamed request until its first output reaches the proxy (`ResponseTap.first_token_at`: on vLLM and
SGLang the role-only first chunk, which leaves with the first token; a tool call's first
`tool_calls` delta comes only once its name is decoded), an unstreamed one while its uncached tokens
at the measured prefill rate are not done. Every other request in flight is decoding: an engine
step that carries a warm's prefill is longer for it too. A mixin of `LivePolicyObserver`, so it
reads the observer's own state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from proxy.core.view import EngineLoad

if TYPE_CHECKING:
    from proxy.core.economics import RunningSet
    from proxy.core.policy import ScoutPolicy
    from proxy.runtime.request_state import RequestState


class LoadView:
    """`load()` for `LivePolicyObserver` (which owns these attributes)."""

    policy: ScoutPolicy
    clock: Callable[[], float]
    engine_waiting: Callable[[], int]
    engine_external: Callable[[], int]
    lane_active: Callable[[], bool]
    running: RunningSet
    utilisation: float
    _inflight: dict[int, float]
    _states: dict[int, RequestState]

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    def load(self) -> EngineLoad:
        """What the planner weighs actions against: client requests in flight, those still waiting
        for their first output (a warm now would queue in front of them) and the rest (decoding: a
        warm now lengthens their steps), the running set's distinct tokens, the engine's queue and
        prefill utilisation."""
        now = self.clock()
        prefilling = sum(1 for rid, st in self._states.items() if self._prefilling(rid, st, now))
        return EngineLoad(
            inflight=len(self._inflight),
            waiting=int(self.engine_waiting() or 0),
            prefilling=prefilling,
            decoding=max(0, len(self._inflight) - prefilling),
            running_tokens=self.running.tokens,
            utilisation=self.utilisation,
            priority_lane=self.lane_active(),
            external=int(self.engine_external() or 0),
        )

    def _prefilling(self, rid: int, st: RequestState, now: float) -> bool:
        """Still in prefill: no first streamed token yet; unstreamed (no token to see), while its
        uncached tokens at the measured prefill rate are not done."""
        tap = st.tap
        if tap is not None and tap.first_token_at is not None:
            return False
        if tap is not None and tap.stream:
            return True
        view, obs = st.view, st.observed
        if view is None or obs is None:
            return True  # not observed yet: just arrived
        rate = self.policy.config.prefill_tokens_per_s
        todo = max(0, view.total_tokens - int(obs.resident_tokens or 0))
        return now < self._inflight.get(rid, now) + todo / max(1.0, rate)
