"""Pure policy core (see docs/architecture.md and docs/policy.md): no web, async or metrics imports.

Re-exports the contract so callers can write ``from proxy.core import ScoutPolicy, RequestView``.
"""

from .actions import Action, ObservedRequest, PolicyStats
from .config import PolicyConfig
from .fingerprint import WARMUP_HEADER, view_from_openai
from .policy import ScoutPolicy
from .residency import ResidencyShadow
from .session_ids import SESSION_HEADER
from .view import EngineLoad, RequestView, ResponseOutcome, view_from_blocks

__all__ = [
    "SESSION_HEADER",
    "WARMUP_HEADER",
    "Action",
    "EngineLoad",
    "ObservedRequest",
    "PolicyConfig",
    "PolicyStats",
    "RequestView",
    "ResidencyShadow",
    "ResponseOutcome",
    "ScoutPolicy",
    "view_from_blocks",
    "view_from_openai",
]
