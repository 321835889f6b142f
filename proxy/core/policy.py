"""ScoutPolicy: the facade the live proxy and the replay evaluator drive (skeleton: bodies follow)."""

from __future__ import annotations

from .actions import Action, ObservedRequest, PolicyStats
from .config import PolicyConfig
from .residency import ResidencyShadow
from .view import EngineLoad, RequestView, ResponseOutcome


class ScoutPolicy:
    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        self.residency = ResidencyShadow(self.config.residency_capacity_tokens,
                                         self.config.near_eviction_fraction)
        self._next_id = 0

    def observe_request(self, view: RequestView, now: float) -> ObservedRequest:
        self._next_id += 1
        hit = self.residency.on_forward(view, now)
        return ObservedRequest(request_id=self._next_id, agent_id=None, session_id=view.session_id,
                               resident_tokens=hit)

    def observe_response(self, request_id: int, outcome: ResponseOutcome, now: float) -> None:
        return None

    def plan(self, now: float, load: EngineLoad = EngineLoad()) -> list[Action]:
        return []

    def record_action_result(self, action: Action, ok: bool, now: float) -> None:
        return None

    def stats(self) -> PolicyStats:
        return PolicyStats(predictability=0.0)

    def snapshot(self) -> dict:
        return {"version": 1}

    def restore(self, data: dict) -> None:
        return None
