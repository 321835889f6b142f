"""`demo-app`: the live demo's app (`proxy/demo/scenes.py` APP, docs/demo.md) in the replay's terms.

Why its own generator: the demo's app is not a group chat with tool calls on a share of turns. A
session is one task handed to one agent, which makes exactly `tool_rounds` tool calls in a row
(each result appended to its context) and then answers; each agent's tools take a characteristic
time (log-uniform over `tool_seconds` across agents, fixed per agent and seed), each call that time
× uniform(1 − `agent_tool_jitter`, 1 + `agent_tool_jitter`); the sessions start as one burst,
uniformly within `start_spread_s`, as the demo's closed loop starts them. `workloads.generate`
hands every spec with `tool_rounds > 0` to `generate_demo`.

Token sizes are the demo's as the simulated engine tokenizes them (sim-wordpiece-v1, ~1.05 tokens
per word of the demo's vocabulary; measured on `build_agents(APP)`): anchors (system prompt + two
tool schemas, rendered by the chat template) 578–637 tokens — docs/demo.md's "~300-400 tokens"
undercounts the schemas —, a task of 200–400 words ~210–425 tokens, a tool call as the engine
generates it ~30 tokens, a tool result of 100–250 words ~115–275 tokens with its wrapper, an
answer ~8 tokens (the sim engine's `--output-tokens 8`, jitter 0.5).

Timing: inside a session the next request follows the previous one's nominal latency (prefill at
`prefill_tokens_per_s`, decode at `decode_tokens_per_s`) plus the tool's time, as in
`workloads.py` (open loop inside the session: the live demo's client waits for the engine, so
there an overloaded engine stretches the sessions, here it queues them). With `busy` set, the start
window is instead chosen so the offered work at a perfect cache (`regimes.session_work_s`, cost
model at `prefill_tokens_per_s`) over the window plus the median session length is that share.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from proxy.cachemodel.cost_model import CostModel
from proxy.replay.traces import ReplayRequest

if TYPE_CHECKING:  # workload_presets.py imports this module for PRESETS: no import of it at load time
    from proxy.replay.workloads import WorkloadSpec, _Chains

CALL_TOKENS = 30  # a tool call as the sim engine renders it (<tool_call>{"name", "arguments"}</tool_call>)

# the preset's WorkloadSpec fields (workload_presets.PRESETS["demo-app"] = WorkloadSpec(**DEMO_APP))
DEMO_APP: dict[str, Any] = {
    "name": "demo-app",
    "topology": "selector",  # the next agent of a multi-turn task; the preset has one turn (steps 1)
    "agents": 6,
    "predictability": 0.85,
    "anchor_tokens": (578, 637),
    "task_tokens": (210, 425),
    "reply_tokens": (4, 12),  # the answer: --output-tokens 8 with jitter 0.5
    "steps": (1, 1),
    "sessions": 24,
    "load": None,
    "tool_from": 0,
    "tool_agents": 5,  # agents tool_from..tool_agents call tools: all six
    "tool_prob": 1.0,
    "tool_seconds": (5.0, 12.0),  # scene 1; scene 2: 0.5-2 s (grid `demo`)
    "tool_result_tokens": (115, 275),
    "gap_seconds": 0.3,  # think gap between turns
    "prefill_tokens_per_s": 6000.0,  # scene 1's engine; scene 2: 4,000
    "tool_rounds": 2,
    "agent_tool_jitter": 0.25,
    "start_spread_s": 8.0,
}


def agent_tool_base(spec: WorkloadSpec, agent: int) -> float:
    """Agent `agent`'s characteristic tool time (s): log-uniform over `tool_seconds`, per agent and seed."""
    lo, hi = spec.tool_seconds
    return lo * (hi / lo) ** random.Random(spec.seed * 31 + agent).random()


def _session(
    spec: WorkloadSpec, sid: int, chains: _Chains, script: list[int], rng: random.Random
) -> list[tuple[float, ReplayRequest]]:
    """One task: per turn, `tool_rounds` tool calls in a row, then the answer."""
    out: list[tuple[float, ReplayRequest]] = []
    t = 0.0
    hist = rng.randint(*spec.task_tokens)
    cur: int | None = None

    from proxy.replay.workloads import _next_agent, session_request

    def emit(agent: int, out_tokens: int, finish: str, tool_s: float | None) -> float:
        req, latency = session_request(spec, chains, sid, agent, hist, out_tokens, finish, tool_s)
        out.append((t, req))
        return latency

    for step in range(rng.randint(*spec.steps)):
        cur = _next_agent(spec, cur, step, script, rng)
        if spec.tool_from <= cur <= spec.tool_agents:
            base = agent_tool_base(spec, cur)
            for _ in range(spec.tool_rounds):
                tool_s = base * rng.uniform(1 - spec.agent_tool_jitter, 1 + spec.agent_tool_jitter)
                t += emit(cur, CALL_TOKENS, "tool_calls", tool_s) + tool_s
                hist += CALL_TOKENS + rng.randint(*spec.tool_result_tokens)
        reply = rng.randint(*spec.reply_tokens)
        t += emit(cur, reply, "stop", None) + spec.gap_seconds
        hist += reply
    return out


def start_window(spec: WorkloadSpec, sessions: list[list[tuple[float, ReplayRequest]]]) -> float:
    """The window the sessions start in: `start_spread_s`, or the one that offers `busy`."""
    if not spec.busy:
        return spec.start_spread_s
    from proxy.replay.regimes import session_work_s
    from proxy.replay.workloads import _BUSY_DECODE_BATCH

    work = session_work_s(sessions, CostModel(prefill_token_s=1.0 / spec.prefill_tokens_per_s), _BUSY_DECODE_BATCH)
    length = statistics.median(s[-1][0] for s in sessions if s) if any(sessions) else 0.0
    return max(0.0, work / spec.busy - length)


def generate_demo(spec: WorkloadSpec) -> list[ReplayRequest]:
    """The demo app's request stream, time ordered. Same spec (seed included) -> same stream."""
    from proxy.replay.workloads import _Chains, random_cycle

    if spec.tool_rounds <= 0:
        raise ValueError("generate_demo needs tool_rounds > 0")
    rng = random.Random(spec.seed)
    bs = spec.block_size
    sizes = [max(bs, rng.randint(*spec.anchor_tokens) // bs * bs) for _ in range(spec.agents)]
    chains = _Chains(spec, sizes)
    script = random_cycle(spec.agents, rng)
    sessions = [_session(spec, s, chains, script, rng) for s in range(spec.sessions)]
    window = start_window(spec, sessions)
    starts = random.Random(spec.seed * 7919 + 1)
    out: list[tuple[float, int, ReplayRequest]] = []
    seq = 0
    for sess in sessions:
        start = starts.uniform(0.0, window) if window > 0 else 0.0
        for rel, req in sess:
            out.append((start + rel, seq, req))
            seq += 1
    out.sort(key=lambda x: (x[0], x[1]))
    return [replace(req, t=round(t, 6)) for t, _, req in out]
