"""Priority lanes in the replay (issue 24): the slack lane and the session lane on `SimEngine`.

Both run the engine under vLLM's `--scheduling-policy priority` (`EngineConfig.scheduling_policy`:
the waiting queue is a heap on (priority, arrival), lower first; the lowest-priority running request
is the first preempted; `docs/sim-engine.md` "Scheduler" cites vLLM's sources).

- **Slack lane** (`scout-proxy-lane`, `scout.ScoutProxyLanePolicy`): the live proxy with an engine
  that schedules by priority: every warmup and touch at the lowest priority (`LANE_LOWEST`, as the
  vLLM adapter's `warm_fields`), the planner told (`EngineLoad.priority_lane`) and the executor not
  waiting on the engine's queue (as `LiveRuntime`'s executor load). Session timing is the trace's.
- **Session lane** (`SessionLaneDriver`): client requests carry the priority the live proxy's
  `--session-priority continue|las` gives them: the same `runtime.session_lane.SessionLane` ranks
  (rank at arrival, `served` at the response with computed prompt + output tokens, as
  `live_policy` does), mapped to vLLM's sign by `engines.base.lane_engine_priority`. Reordering a
  session's calls can only shorten the session if its next call follows its previous answer, so
  these runs are **closed loop**: a session's request arrives its trace pause after the engine
  finished the session's previous one (`session_links`); a session's first request keeps its trace
  time. The FCFS baseline (`mode="fcfs"`) runs the same closed loop on the stock FCFS engine.

Session figures (`session_metrics`): mean session completion (first call's arrival to the last
answer) and the TTFT of sessions' first calls (mean, p99).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from proxy.engines.base import lane_engine_priority
from proxy.replay.engine_run import EngineDriver
from proxy.replay.traces import ReplayRequest
from proxy.runtime.session_lane import SessionLane
from proxy.simengine.engine import EngineRequest, SimEngine

if TYPE_CHECKING:
    from proxy.replay.measure import RunRecorder

SESSION_MODES = ("fcfs", "continue", "las")
VLLM_SIGN = 1  # vLLM: lower runs first (the adapters' priority_sign)
DEFAULT_AGEING_S = 30.0  # Settings.session_priority_ageing_s's default


def session_links(
    requests: Sequence[ReplayRequest], prefill_tokens_per_s: float, decode_tokens_per_s: float
) -> tuple[list[int], list[float]]:
    """Per request: its session's previous request (-1: a session's first, or no session) and the
    pause after that request's answer. The generator places a session's next request at the previous
    one's arrival + its nominal latency (prompt / prefill rate + output / decode rate) + the tool
    duration or think time (`workloads._session`): the pause is what is left after the nominal
    latency. Parallel branches (`fanout`) have no single predecessor: refused."""
    prev: dict[str, int] = {}
    dep = [-1] * len(requests)
    pause = [0.0] * len(requests)
    for i, r in enumerate(requests):
        if r.session_id is None:
            continue
        if r.category == "branch":
            raise ValueError("closed-loop session timing does not model parallel branches (fanout)")
        j = prev.get(r.session_id)
        if j is not None:
            p = requests[j]
            nominal = p.prompt_tokens / prefill_tokens_per_s + p.output_tokens / decode_tokens_per_s
            dep[i] = j
            pause[i] = max(0.0, r.t - p.t - nominal)
        prev[r.session_id] = i
    return dep, pause


class SessionLaneDriver(EngineDriver):
    """Closed-loop session timing, and the session lane's priority on client requests (`mode`
    continue / las; fcfs: no priority, the stock FCFS engine)."""

    def __init__(self, *args, mode: str, links: tuple[list[int], list[float]], ageing_s: float, **kw):
        if mode not in SESSION_MODES:
            raise ValueError(f"session lane mode {mode!r}: expected one of {SESSION_MODES}")
        super().__init__(*args, **kw)
        if mode != "fcfs":  # the lane needs an engine that schedules by priority
            self.engine = SimEngine(dataclasses.replace(self.engine.config, scheduling_policy="priority"))
        self.mode = mode
        dep, self.pause = links
        self.children: dict[int, list[int]] = {}
        heap: list[tuple[float, int]] = []
        for i, j in enumerate(dep):
            if j < 0:
                heap.append((self.requests[i].t, i))
            else:
                self.children.setdefault(j, []).append(i)
        heapq.heapify(heap)
        self.heap = heap
        self.log: list[float] = []  # arrival times in arrival order
        self.idle_moves = 0  # steps that emitted nothing but preempted or admitted
        origin = self.requests[0].t if self.n else 0.0
        self.lane = SessionLane(mode, ageing_s, origin) if mode != "fcfs" else None
        self.keys = [(r.tenant, r.session_id) if r.session_id else None for r in self.requests]

    def _peek(self) -> float:
        return self.heap[0][0] if self.heap else float("inf")

    def _pop(self) -> tuple[int, float]:
        t, i = heapq.heappop(self.heap)
        self.log.append(t)
        return i, t

    def arrival_time(self, k: int) -> float:
        """Arrived ones from the log; the next one is the earliest pending (later ones are not
        known yet: they wait on answers)."""
        if k < len(self.log):
            return self.log[k]
        return self._peek() if k == len(self.log) else float("inf")

    def _moved(self, res) -> bool:
        # closed loop, the pending arrivals wait on answers: a step that only preempted (the
        # running request that could not grow was itself the lowest priority) is progress, not a
        # stall; bounded so a preempt/readmit cycle cannot spin forever
        if res.preempted or res.admitted:
            self.idle_moves += 1
            if self.idle_moves > 100_000:
                raise RuntimeError("the engine cycles without emitting a token")
            return True
        return False

    def _priority(self, i: int, t: float) -> int:
        if self.lane is None:
            return 0
        return lane_engine_priority(self.lane.rank(self.keys[i], t), VLLM_SIGN)

    def _finished(self, er: EngineRequest, end: float) -> None:
        j = er.req_id
        if j < self.n:
            key = self.keys[j]
            if self.lane is not None and key is not None:
                r = self.requests[j]
                served = max(0, r.prompt_tokens - er.cached_tokens) + max(1, int(r.output_tokens))
                self.lane.served(key, served, er.arrival, end)
            for c in self.children.pop(j, ()):
                heapq.heappush(self.heap, (end + self.pause[c], c))
        super()._finished(er, end)


def session_metrics(requests: Sequence[ReplayRequest], rec: RunRecorder) -> dict:
    """Mean session completion (first call's arrival to its last answer) and first-call TTFT."""
    first: dict[str, int] = {}
    last_end: dict[str, float] = {}
    arrival, turn, ttft = rec.arrival, rec.turn, rec.ttft
    for i, r in enumerate(requests):
        sid = r.session_id
        if sid is None:
            continue
        first.setdefault(sid, i)
        end = float(arrival[i] + turn[i])
        if end > last_end.get(sid, -np.inf):
            last_end[sid] = end
    if not first:
        return {"sessions": 0}
    done = np.array([last_end[s] - float(arrival[i]) for s, i in first.items()])
    ft = np.array([float(ttft[i]) for i in first.values()])
    return {
        "sessions": len(first),
        "session_completion_mean_s": float(done.mean()),
        "session_completion_p90_s": float(np.percentile(done, 90)),
        "first_call_ttft_mean_s": float(ft.mean()),
        "first_call_ttft_p99_s": float(np.percentile(ft, 99)),
    }
