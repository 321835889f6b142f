"""Why the planner did or did not act: the skip reasons it counts and a bounded ring of its recent
decisions (``/debug/state`` -> ``decisions``).

Every candidate the planner drops is dropped by one named piece for one skip reason (the pieces
and their skip reasons: plan_registry.py), and every action it emits is ``ACTED``; a whole tick the
planner stands back from is a decision without a candidate. Each decision says its ``outcome``
(the skip reason, or ``acted``: the ``reason`` label of ``cachescout_planner_skips_total``), the
``stage`` that decided (tick, source, filter, pricer, picker, veto), the piece that decided
(``by``: the metric's ``piece`` label), the source piece that offered the candidate (``source``)
and the action reason it would have carried (``reason``). The ring keeps the last
``DECISION_RING`` of them with the figures the stage compared:
R (the tenant's gate), P (the predicted demand's probability), the missing tokens and lead time,
and, once priced, the economics' saving, cost and P(kept) (``economics.Verdict``).

Why bounded this way: each entry is one tuple of at most 16 scalars (an anchor id is a 16-hex
string, outcomes, stages, pieces and reasons come from fixed sets, the tenant is kept as its
length only, never the salt), so the ring's memory is ``DECISION_RING`` × a fixed record size (``ENTRY_BYTES_MAX``);
consecutive repeats of one decision are folded into one entry with a count, so a busy engine's
tick skips do not push every candidate decision out. No prompt text, no session ids.
"""

from __future__ import annotations

from collections import deque
from typing import Final

ACTED = "acted"  # the candidate became an action (every other outcome is a skip reason)
DECISION_RING = 256
ENTRY_BYTES_MAX = 1024  # generous upper bound of one entry (tuple + floats + a 16-char id)

# one entry: (at, outcome, by, source, reason, anchor_id, tenant_len, kind, r, prob, missing, lead,
# saving, cost, kept, count); the stage is the deciding piece's (``stage_of``), looked up in rows()
Entry = tuple[
    float, str, str, str, str, str, int, str, float | None, float | None, float | None, float | None,
    float | None, float | None, float | None, int,
]  # fmt: skip
FIELDS = (
    "at", "outcome", "by", "source", "reason", "anchor", "tenant", "kind", "r", "p", "missing", "lead",
    "saving", "cost", "p_kept", "count",
)  # fmt: skip
COUNT: Final = 15  # the entry's count field


def _fig(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


class DecisionLog:
    """The ring. ``note`` is on the planner's hot path: one tuple, no formatting."""

    __slots__ = ("ring", "stage_of")

    def __init__(self, size: int = DECISION_RING, stage_of: dict[str, str] | None = None) -> None:
        self.ring: deque[Entry] = deque(maxlen=max(1, size))
        self.stage_of = stage_of or {}  # deciding piece -> its stage (plan_registry.STAGE_OF)

    def note(
        self,
        at: float,
        outcome: str,
        by: str = "",
        source: str = "",
        reason: str = "",
        anchor: str = "",
        tenant: str = "",
        kind: str = "",
        r: float | None = None,
        prob: float | None = None,
        missing: float | None = None,
        lead: float | None = None,
        saving: float | None = None,
        cost: float | None = None,
        kept: float | None = None,
    ) -> None:
        ring = self.ring
        count = 1
        if ring:
            last = ring[-1]
            if (
                last[1] == outcome
                and last[5] == anchor
                and last[2] == by
                and last[3] == source
                and last[4] == reason
                and last[7] == kind
            ):
                ring.pop()  # the same decision again: one entry, the latest figures, counted
                count = last[COUNT] + 1
        ring.append(
            (at, outcome, by, source, reason, anchor, len(tenant), kind, r, prob, missing, lead, saving, cost, kept,
             count)
        )  # fmt: skip

    def rows(self, now: float | None = None) -> list[dict[str, object]]:
        """JSON-ready rows, oldest first: figures rounded, the tenant as ``salt:<n>c`` (never the
        salt), ``at`` as seconds ago when ``now`` is given."""
        out: list[dict[str, object]] = []
        for e in self.ring:
            row: dict[str, object] = {
                "s_ago" if now is not None else "at": round(now - e[0] if now is not None else e[0], 3),
                "outcome": e[1],
                "stage": self.stage_of.get(e[2], ""),
                "by": e[2],
                "source": e[3],
                "reason": e[4],
                "anchor": e[5],
                "tenant": f"salt:{e[6]}c" if e[6] else "",
                "kind": e[7],
                "count": e[COUNT],
            }
            for name, v in zip(FIELDS[8:15], e[8:15], strict=True):
                if v is not None:
                    row[name] = _fig(v)
            out.append(row)
        return out

    def top(self, n: int = 5) -> list[tuple[str, int]]:
        """The most frequent outcomes in the ring (folded repeats counted)."""
        counts: dict[str, int] = {}
        for e in self.ring:
            counts[e[1]] = counts.get(e[1], 0) + e[COUNT]
        return sorted(counts.items(), key=lambda kv: -kv[1])[:n]
