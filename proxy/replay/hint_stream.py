"""Hint streams for the replay, derived from a workload's ground truth.

Why from ground truth: a generated workload knows when each tool really returns, which turn is a
session's last, who speaks next and where it forks, so it can play the runtime that sends hints —
truthfully, with noise, or lying — and the replay can measure whether the hints pay. The runtime
only knows what it would know live: a tool's expected duration is the truth times log-normal noise
(sent when the model's tool call ends), a tool's end is announced ``finish_lead_s`` before the
resumed request, a session's end after its last response, the next agent after each response, a
fork when its first branch is sent.

Sources:
- ``runtime`` (truthful; ``noise`` > 0 blurs durations and drops a share of the hints);
- ``liar``: says a session ended when it is only waiting for a tool, that a tool started when the
  session is over, that the wrong agent comes next.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.core.hints import Hint
from proxy.replay.traces import ReplayRequest

TRUTHFUL = "runtime"
LIAR = "liar"
TOOL_KINDS = ("tool_started", "tool_finished", "session_ended")
ALL_KINDS = (*TOOL_KINDS, "fanout", "next_agent")


@dataclass(frozen=True, slots=True)
class HintStreamSpec:
    truthful: bool = True  # the truthful runtime source sends hints
    liar: bool = False  # a lying source sends hints too
    kinds: tuple[str, ...] = TOOL_KINDS
    noise: float = 0.0  # sigma of the log-normal duration noise; drop share = noise / 2
    finish_lead_s: float = 0.05  # tool_finished comes this long before the resumed request
    next_agent_p: float = 0.9  # the probability the runtime attaches to next_agent
    seed: int = 0


PRESET_STREAMS = {
    "scout-proxy+hints": HintStreamSpec(),
    "scout-proxy+noisy-hints": HintStreamSpec(noise=0.5),
    "scout-proxy+all-hints": HintStreamSpec(kinds=ALL_KINDS),
    "scout-proxy+liar": HintStreamSpec(truthful=False, liar=True, kinds=ALL_KINDS),
    "scout-proxy+hints+liar": HintStreamSpec(liar=True, kinds=ALL_KINDS),
}


class HintEmitter:
    """Decides, event by event, which hints each source sends (deterministic for a seed)."""

    def __init__(self, spec: HintStreamSpec, requests: Sequence[ReplayRequest]) -> None:
        self.spec = spec
        self.requests = requests
        self.rng = random.Random(spec.seed)
        n = len(requests)
        self.next_in_session = [-1] * n
        self.first_branch: dict[int, int] = {}  # index of a fork's first branch -> branch count
        last: dict[str, int] = {}
        run_start: dict[str, int] = {}
        agents: set[str] = set()
        for i, r in enumerate(requests):
            sid = r.session_id
            if r.agent:
                agents.add(r.agent)
            if sid is None:
                continue
            prev = last.get(sid)
            if prev is not None:
                self.next_in_session[prev] = i
            last[sid] = i
            if r.category == "branch":
                if prev is None or requests[prev].category != "branch":
                    run_start[sid] = i
                    self.first_branch[i] = 0
                self.first_branch[run_start[sid]] += 1
        self.agents = sorted(agents)

    def _send(self, kind: str) -> bool:
        return kind in self.spec.kinds and not (self.spec.noise and self.rng.random() < self.spec.noise / 2)

    def _noisy(self, seconds: float) -> float:
        s = self.spec.noise
        return seconds * math.exp(self.rng.gauss(0.0, s)) if s else seconds

    def on_request(self, i: int) -> list[tuple[float, str, Hint]]:
        """Hints the runtime sends together with request ``i`` (after it is observed)."""
        k = self.first_branch.get(i)
        r = self.requests[i]
        if not k or k < 2 or not r.session_id:
            return []
        out = []
        if self.spec.truthful and self._send("fanout"):
            out.append((r.t, TRUTHFUL, Hint("fanout", r.session_id, branches=k)))
        return out

    def on_response(self, i: int, now: float) -> list[tuple[float, str, Hint]]:
        """Hints sent when request ``i``'s response ends at ``now`` (times may lie in the future)."""
        r = self.requests[i]
        sid = r.session_id
        if not sid:
            return []
        spec = self.spec
        j = self.next_in_session[i]
        nxt = self.requests[j] if j >= 0 else None
        out: list[tuple[float, str, Hint]] = []
        if spec.truthful:
            if nxt is None:
                if self._send("session_ended"):
                    out.append((now, TRUTHFUL, Hint("session_ended", sid)))
            elif r.finish_reason == "tool_calls":
                gap = max(0.0, nxt.t - now)
                if self._send("tool_started"):
                    out.append((now, TRUTHFUL, Hint("tool_started", sid, expected_s=self._noisy(gap))))
                if self._send("tool_finished"):
                    out.append((max(now, nxt.t - spec.finish_lead_s), TRUTHFUL, Hint("tool_finished", sid)))
            if nxt is not None and nxt.agent and self._send("next_agent"):
                out.append((now, TRUTHFUL, Hint("next_agent", sid, agent=nxt.agent, probability=spec.next_agent_p)))
        if spec.liar:
            rng = self.rng
            if nxt is None:
                if "tool_started" in spec.kinds:  # the session is over
                    out.append((now, LIAR, Hint("tool_started", sid, expected_s=rng.uniform(0.5, 10.0))))
            elif r.finish_reason == "tool_calls" and "session_ended" in spec.kinds:
                out.append((now, LIAR, Hint("session_ended", sid)))  # it only waits for a tool
            if nxt is not None and self.agents and "next_agent" in spec.kinds:
                wrong = [a for a in self.agents if a != nxt.agent]
                if wrong:
                    out.append((now, LIAR, Hint("next_agent", sid, agent=rng.choice(wrong), probability=0.95)))
        return out


def resumed_after_tool(requests: Sequence[ReplayRequest]) -> list[int]:
    """Indices of requests that resume their session after a ``tool_calls`` answer."""
    last: dict[str, int] = {}
    out = []
    for i, r in enumerate(requests):
        sid = r.session_id
        if sid is None:
            continue
        prev = last.get(sid)
        if prev is not None and requests[prev].finish_reason == "tool_calls":
            out.append(i)
        last[sid] = i
    return out
