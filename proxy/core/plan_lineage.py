"""The lineage-resume source: on text views, a lineage whose call ended keeps (or re-warms) what
its next call will re-read, when that pays (issue 23 item 5; lineages.py says what a lineage is).

A text view carries no finish reason, so a pause there may be a tool running or a user thinking:
either way the lineage's next call is its resume. Priced and labelled like ``ToolResume`` (reason
``tool_resume``, a session context: ``context=True``, warm allowed), with the lineage's learned
resume share and gaps for P instead of the agent's tool gaps; not behind the R gate (a lineage
going on is a fact of its own history, as a tool resume is). Offered when a lineage pauses, and
whenever some call ends, the most recent paused lineages again (at most ``sweep_sessions`` looked
at, ``sweep_top_n`` offered): a call ending is when the engine may have slack for a lineage the
traffic evicted meanwhile. Not at the sweep cadence: in the replay a tick between responses is a
client arrival, and a warm planned then runs alongside that request (measured: it raised the
arrival's TTFT more than the resume saved).
"""

from __future__ import annotations

from .action_payload import ActionPayload
from .actions import REASON_TOOL_RESUME
from .agents import agent_id_for
from .candidates import Candidate
from .lineages import Lineage, LineageBook
from .plan_piece import PER_TICK, SOURCE, Piece
from .plan_tick import Tick


class LineageResume(Piece):
    """A text view's paused lineage: what its next call re-reads (the module docstring)."""

    name = "lineage_resume"
    kind = SOURCE
    cadence = PER_TICK
    reasons = (REASON_TOOL_RESUME,)
    skips = ("resume_unlikely",)
    settings = ("lineage_resume", "continuation_prior", "continuation_min_samples", "tool_resume_min_p")

    def collect(self, t: Tick) -> None:
        book = t.lineages
        if book is None or not book.lineages:
            return
        cands: dict[int, Candidate] = {}
        for lid in book.paused:
            ln = book.lineages.get(lid)
            if ln is not None:
                self._offer(t, book, ln, cands, True)
        # a call that just ended may have left the engine slack for a lineage evicted meanwhile
        recheck = bool(book.paused)
        book.paused.clear()
        cfg = t.cfg
        if (
            recheck
            and cfg.sweep_sessions
            and book.any_likely(cfg.continuation_prior, cfg.continuation_min_samples, cfg.tool_resume_min_p)
        ):
            # the most recent paused lineages whose kind of pause resumes often enough (the rate, a
            # lookup, before the gaps' timing): at most sweep_top_n priced, sweep_sessions looked at
            swept: dict[int, Candidate] = {}
            priced = 0
            likely: dict[tuple[str, bool], bool] = {}  # (tenant, after a resume) -> rate passes
            for k, ln in enumerate(reversed(book.lineages.values())):
                if k >= cfg.sweep_sessions or priced >= cfg.sweep_top_n:
                    break
                if ln.inflight or ln.lid in cands:
                    continue
                key = (ln.tenant, ln.calls > 1)
                ok = likely.get(key)
                if ok is None:
                    r = book.rate(ln, cfg.continuation_prior, cfg.continuation_min_samples)
                    ok = likely[key] = r >= cfg.tool_resume_min_p
                if not ok:
                    continue
                priced += 1
                self._offer(t, book, ln, swept, False)
            cands.update(swept)
        t.out.extend(cands.values())

    def _offer(self, t: Tick, book: LineageBook, ln: Lineage, out: dict[int, Candidate], first: bool) -> None:
        """``first``: offered as it pauses (an unlikely resume is counted once per pause, not at
        every re-offer)."""
        if ln.inflight or ln.last_end is None or not ln.expect or ln.payload is None:
            return
        cfg, now = t.cfg, t.now
        p = book.probability(ln, now, cfg.continuation_horizon_s, cfg.continuation_prior, cfg.continuation_min_samples)
        aid = agent_id_for(ln.tenant, ln.expect[-1])
        if p < cfg.tool_resume_min_p:
            if first:
                t.drop(self.name, "resume_unlikely", self.name, REASON_TOOL_RESUME, aid, ln.tenant, p)
            return
        med, elapsed = book.gap_median(ln.tenant), now - ln.last_end
        out[ln.lid] = Candidate(
            score=p * sum(ln.expect_tokens),
            reason=REASON_TOOL_RESUME,
            tenant=ln.tenant,
            anchor_id=aid,
            hashes=ln.expect,
            block_tokens=ln.expect_tokens,
            payload=ActionPayload(ln.payload),
            prob=p,
            lead=med - elapsed if med is not None and elapsed < med else None,
            warm_ok=True,
            context=True,
            source=self.name,
        )
