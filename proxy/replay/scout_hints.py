"""`scout-proxy` with a runtime sending hints: the same planner, plus the live proxy's HintDriver.

Policies (see ``hint_stream.PRESET_STREAMS``): ``scout-proxy+hints`` (truthful tool hints:
tool_started with the expected duration, tool_finished, session_ended), ``+noisy-hints`` (durations
x log-normal noise, a quarter of the hints dropped), ``+all-hints`` (also fanout and next_agent),
``+liar`` (only a lying source), ``+hints+liar`` (both). Hints due by an event are delivered before
it, as the live proxy would have received them; hint-driven actions are labelled
``hint:<kind>@<source>`` in the per-signal tables, so conversion, lead time and yield are reported
per source and hint kind next to the inferred signals, and ``extra.hints`` carries each source's
calibration (checked hints, conversion, token-weighted conversion, lead time, standing).

``resume_latency`` gives every policy's mean TTFT of tool resumes (the requests that continue a
session after a ``tool_calls`` answer): the figure tool hints are meant to move.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from proxy.core.hint_actions import Hint, HintDriver
from proxy.core.hints import HintConfig
from proxy.core.view import EngineLoad
from proxy.replay.hint_stream import PRESET_STREAMS, HintEmitter, HintStreamSpec, resumed_after_tool
from proxy.replay.measure import RunRecorder
from proxy.replay.scout import ScoutProxyPolicy
from proxy.replay.traces import ReplayRequest

HINT_POLICIES = tuple(PRESET_STREAMS)


class ScoutProxyHintsPolicy(ScoutProxyPolicy):
    name = "scout-proxy+hints"

    def __init__(
        self,
        overrides: dict | None = None,
        use_sessions: bool = True,
        block_size: int = 16,
        stream: HintStreamSpec | None = None,
        name: str | None = None,
    ):
        super().__init__(overrides, use_sessions, block_size)
        self.stream = stream or HintStreamSpec()
        if name:
            self.name = name

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.engine_driver = self.driver  # the replay's engine driver (engine_run.EngineDriver)
        self.requests = requests
        self.driver_hints = HintDriver(self.sp, HintConfig())
        self.emitter = HintEmitter(self.stream, requests)
        self._due: list[tuple[float, int, str, Hint]] = []
        self._seq = 0
        self._tenants: dict[str, str] = {}  # session id -> its tenant (the replay is finite)
        self.dropped_stale = 0  # planned actions already past their deadline when the plan came back

    # -- hint delivery ------------------------------------------------------------------------------
    def _queue(self, items, now: float) -> None:
        for t, source, hint in items:
            if t <= now:
                self.driver_hints.submit([hint], source, now, self._tenants.get(hint.session_id or "", ""))
            else:
                self._seq += 1
                heapq.heappush(self._due, (t, self._seq, source, hint))

    def _deliver(self, now: float) -> None:
        due = self._due
        while due and due[0][0] <= now:
            t, _, source, hint = heapq.heappop(due)
            self.driver_hints.submit([hint], source, t, self._tenants.get(hint.session_id or "", ""))

    # -- events -------------------------------------------------------------------------------------
    def on_request(self, i, req, now):
        self._deliver(now)
        obs = self.sp.observe_request(self._view(req), now)
        self._rid[i] = obs.request_id
        self.inflight += 1
        d = self.driver_hints
        if obs.session_id:
            self._tenants[obs.session_id] = req.tenant  # hints are scoped to their session's tenant
        if d.watching or req.agent:
            d.observe(req.tenant, obs.session_id, obs.agent_id, req.agent, now)
        self._queue(self.emitter.on_request(i), now)
        self._plan(now)

    def on_admit(self, i, req, hit_blocks, now):
        return None

    def on_response(self, i, req, hit_blocks, now):
        self._deliver(now)
        self._observe_response(i, req, hit_blocks, now)
        self._queue(self.emitter.on_response(i, now), now)
        self._plan(now)

    def _plan(self, now: float) -> None:
        e = self.engine_driver
        actions = self.sp.plan(now, EngineLoad(inflight=self.inflight, waiting=e.waiting()))
        offered = self.driver_hints.last_offered
        for a in actions:
            if now > a.deadline:
                self.dropped_stale += 1
                self.sp.record_action_result(a, False, now)
                continue
            hint = offered.get(a.anchor_id)
            label = f"hint:{hint[0]}@{hint[1]}" if hint is not None else a.reason

            def done(ok: bool, end: float, cached: int, computed: int, a=a) -> None:
                self.executed += ok
                self.sp.record_action_result(a, ok, end, computed)

            if not e.submit_action(a.kind, label, a.block_hashes, a.tokens, now, a.priority, done):
                self.sp.record_action_result(a, False, now)

    def extra(self):
        out = super().extra()
        out["hints"] = self.driver_hints.report()
        return out


def make_hint_policy(name: str, overrides: dict | None, use_sessions: bool, block_size: int) -> ScoutProxyHintsPolicy:
    if name not in PRESET_STREAMS:
        raise ValueError(f"unknown hint policy {name!r}; choose from {HINT_POLICIES}")
    return ScoutProxyHintsPolicy(overrides, use_sessions, block_size, PRESET_STREAMS[name], name)


def resume_latency(rec: RunRecorder, requests: Sequence[ReplayRequest]) -> dict:
    """Mean and p90 TTFT of the requests that resume a session after a tool call."""
    resumes = resumed_after_tool(requests)
    if not resumes:
        return {"tool_resumes": 0, "tool_resume_ttft_mean_s": None, "tool_resume_ttft_p90_s": None}
    sel = rec.ttft_by_request()[np.asarray(resumes, dtype=np.int64)]
    return {
        "tool_resumes": len(resumes),
        "tool_resume_ttft_mean_s": float(sel.mean()),
        "tool_resume_ttft_p90_s": float(np.percentile(sel, 90)),
    }


def hint_report_lines(row: dict) -> list[str]:
    """Markdown for one capacity: tool-resume TTFT of every policy, then per hinted policy the
    calibration of each source and hint kind (the yield of their actions is in the signal tables,
    rows ``hint:<kind>@<source>``)."""
    pols = row["policies"]
    if not any(s.get("tool_resumes") for s in pols.values()):
        return []
    md = [
        "**Tool resumes** (requests continuing a session after a tool call): TTFT mean / p90 s — "
        + "; ".join(
            f"{n} {s['tool_resume_ttft_mean_s']:.4f} / {s['tool_resume_ttft_p90_s']:.4f}"
            for n, s in pols.items()
            if s.get("tool_resume_ttft_mean_s") is not None
        ),
        "",
    ]
    for name, s in pols.items():
        hints = (s.get("extra") or {}).get("hints")
        if not hints or not hints.get("sources"):
            continue
        md.append(
            f"**{name}: hints per source and kind** (conversion = checked hints that came true; "
            "token conversion weights them by the context/anchor tokens they were about; lead = "
            "token-weighted seconds from hint to the request that confirmed it)"
        )
        md.append("")
        md.append(
            "| source | standing fact / prediction | kind | hints | acted | ignored | checked | conversion "
            "| token conversion | lead s |"
        )
        md.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for sid, src in hints["sources"].items():
            for kind, k in src["kinds"].items():
                conv = "–" if k["conversion"] is None else f"{100 * k['conversion']:.1f}%"
                tconv = "–" if k["token_conversion"] is None else f"{100 * k['token_conversion']:.1f}%"
                lead = "–" if k["lead_s"] is None else f"{k['lead_s']:.3f}"
                md.append(
                    f"| {sid} | {src['fact_standing']:.2f} / {src['prediction_standing']:.2f} | {kind} "
                    f"| {k['hints']} | {k['acted']} | {k['ignored']} | {k['checked']} | {conv} | {tconv} "
                    f"| {lead} |"
                )
        md.append("")
    return md
