"""Why the planner did or did not act: the skip reasons it counts and a bounded ring of its recent
decisions (``/debug/state`` -> ``decisions``).

Every candidate the planner drops is dropped by one named stage (``SKIP_REASONS``), and every
action it emits is ``ACTED``; a whole tick the planner stands back from is a decision without a
candidate. The ring keeps the last ``DECISION_RING`` of them with the figures the stage compared:
R (the tenant's gate), P (the predicted demand's probability), the missing tokens and lead time,
and, once priced, the economics' saving, cost and P(kept) (``economics.Verdict``).

Why bounded this way: each entry is one tuple of at most 13 scalars (an anchor id is a 16-hex
string, stages and sources come from fixed sets, the tenant is kept as its length only, never the
salt), so the ring's memory is ``DECISION_RING`` × a fixed record size (``ENTRY_BYTES_MAX``);
consecutive repeats of one decision are folded into one entry with a count, so a busy engine's
tick skips do not push every candidate decision out. No prompt text, no session ids.
"""

from __future__ import annotations

from collections import deque

# why no action came of a tick or a candidate (Planner.skipped; /debug/state "actions_skipped";
# /metrics cachescout_planner_skips_total{reason})
SKIP_REASONS = (
    "tick_engine_busy",  # the engine queues (max_engine_waiting) or max_concurrent actions in flight
    "tick_engine_shared",  # the engine serves requests that are not this proxy's (no slack lane)
    "tick_overflow",  # the running set overflows the cache (or did within a cache lifetime)
    "gate_closed",  # the tenant's R gate is shut (R < r_min, or too few transitions learned yet)
    "resume_unlikely",  # a paused session's continuation probability is below tool_resume_min_p
    "no_agent",  # a session whose agent is unknown or forgotten
    "no_context",  # a session paused on tool_calls with no kept prompt to rebuild (payload, hashes)
    "deferred",  # a successor planned again when the running response ends (plan_trigger auto)
    "duplicate",  # a second candidate for an anchor already priced this tick
    "cooldown",  # acted on this anchor within cooldown_s
    "resident",  # the shadow holds it, not near eviction (or did, and nothing moved since)
    "host_not_now",  # in the host tier; not yet time to load it back
    # touch what is there, no warm: a sweep or hint candidate, or a tool pause whose wake (or next
    # session sweep) still lands a warm before the resume
    "warm_not_allowed",
    "warm_busy",  # a warm would queue behind client traffic
    "wait_for_slack",  # the economics asks to retry at a calmer tick
    "wait_for_decodes",  # a warm that pays once the clients decoding now are done (saving, cost kept)
    "not_worth_it",  # expected saving below cost
    "no_slot",  # more worthwhile candidates than action slots this tick
    "budget",  # the warm token bucket is empty
    "vetoed",  # the runtime's gate: an observe-only window, or a throttled signal
)
ACTED = "acted"  # the candidate became an action
STAGES = (*SKIP_REASONS, ACTED)
DECISION_RING = 256
ENTRY_BYTES_MAX = 1024  # generous upper bound of one entry (tuple + floats + a 16-char id)

# one entry: (at, stage, source, anchor_id, tenant_len, kind, r, prob, missing, lead, saving, cost, kept, count)
Entry = tuple[
    float, str, str, str, int, str, float | None, float | None, float | None, float | None, float | None,
    float | None, float | None, int,
]  # fmt: skip
FIELDS = (
    "at", "stage", "source", "anchor", "tenant", "kind", "r", "p", "missing", "lead", "saving", "cost",
    "p_kept", "count",
)  # fmt: skip


def _fig(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


class DecisionLog:
    """The ring. ``note`` is on the planner's hot path: one tuple, no formatting."""

    __slots__ = ("ring",)

    def __init__(self, size: int = DECISION_RING) -> None:
        self.ring: deque[Entry] = deque(maxlen=max(1, size))

    def note(
        self,
        at: float,
        stage: str,
        source: str = "",
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
            if last[1] == stage and last[3] == anchor and last[2] == source and last[5] == kind:
                ring.pop()  # the same decision again: one entry, the latest figures, counted
                count = last[13] + 1
        ring.append((at, stage, source, anchor, len(tenant), kind, r, prob, missing, lead, saving, cost, kept, count))

    def rows(self, now: float | None = None) -> list[dict[str, object]]:
        """JSON-ready rows, oldest first: figures rounded, the tenant as ``salt:<n>c`` (never the
        salt), ``at`` as seconds ago when ``now`` is given."""
        out: list[dict[str, object]] = []
        for e in self.ring:
            row: dict[str, object] = {
                "s_ago" if now is not None else "at": round(now - e[0] if now is not None else e[0], 3),
                "stage": e[1],
                "source": e[2],
                "anchor": e[3],
                "tenant": f"salt:{e[4]}c" if e[4] else "",
                "kind": e[5],
                "count": e[13],
            }
            for name, v in zip(FIELDS[6:13], e[6:13], strict=True):
                if v is not None:
                    row[name] = _fig(v)
            out.append(row)
        return out

    def top(self, n: int = 5) -> list[tuple[str, int]]:
        """The most frequent stages in the ring (folded repeats counted)."""
        counts: dict[str, int] = {}
        for e in self.ring:
            counts[e[1]] = counts.get(e[1], 0) + e[13]
        return sorted(counts.items(), key=lambda kv: -kv[1])[:n]
