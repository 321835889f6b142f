"""The ``warm_too_late`` filter, re-added as an opt-in piece (issue 36's acceptance: a piece in one
module, its test and one registration line).

A warm whose predicted demand comes before the warm could finish only competes with that demand
for the engine: the request arrives while its own prefix is still being prefilled by the action.
Issue 26 removed this filter from the default pipeline because it earned nothing on the headroom
grid (docs/policy.md "Ablation on the headroom grid": the economics already prices such warms);
it is back as an opt-in piece for deployments whose engines queue actions behind requests
(``CACHESCOUT_POLICY_OVERRIDES='{"piece_params": "{\\"warm_too_late\\": {}}"}'``), and so that the
ablation can be re-run with it on (``--scout-set 'piece_params={"warm_too_late": {"slack": 1.5}}'``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .candidates import Candidate
from .plan_filters import WARM, Filter, Look


@dataclass(frozen=True, slots=True)
class WarmTooLateParams:
    slack: float = 1.0  # the demand must be at least slack × the warm's prefill time away


class WarmTooLate(Filter):
    """The demand is predicted before a warm of the missing tokens could finish (or within
    ``min_lead_s``): no warm (a touch, a retain or nothing are still priced by other paths)."""

    name = "warm_too_late"
    skips = ("warm_too_late",)
    phases = (WARM,)
    settings = ("min_lead_s", "prefill_tokens_per_s")
    Params = WarmTooLateParams
    opt_in = True

    def __init__(self) -> None:
        self.params = WarmTooLateParams()

    def warm(self, c: Candidate, x: Look) -> str | None:
        lead, cfg = c.lead, x.cfg
        need = self.params.slack * x.missing / cfg.prefill_tokens_per_s
        return "warm_too_late" if lead is not None and lead < max(cfg.min_lead_s, need) else None
