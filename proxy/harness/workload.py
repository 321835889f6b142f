"""A live multi-agent workload for `cachescout demo`: an AutoGen-style selector group chat over HTTP.

Why in `harness/`: the demo, the router fleet (`router_fleet.py`), tests and benchmarks all drive
it, and a helper below them must not import the demo (no upward arrows between rooms).

Why a message-level driver (and not `proxy.replay.workloads`): that generator emits block-hash
traces for the replay evaluator; the demo needs real OpenAI requests that go through a real proxy
to a real socket, with streaming, usage, and tool calls the engine decides.

Shape: `agents` agents, each with its own fixed context (system prompt, and tool schemas for the
first `tool_agents`) — the *anchor*, shared by every session. A session is one task: at each step a
supervisor picks the next speaker (the scripted successor with probability `predictability`, else
any agent), the speaker sees its anchor + the task + the shared transcript, and answers. When the
engine answers with a tool call, the client "runs" the tool (sleeps), appends the assistant
tool-call turn and the tool result, and calls the same agent again — the resume. `concurrency`
sessions run at once. Every request streams with `include_usage`, so the driver records the
engine's own `cached_tokens` and the time to first token as the client sees them.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from proxy.replay.workloads import random_cycle

ROLES = ("planner", "researcher", "coder", "tester", "critic", "writer", "analyst", "reviewer")
VOCAB = (
    "policy",
    "cache",
    "prefix",
    "agent",
    "plan",
    "verify",
    "result",
    "input",
    "output",
    "schema",
    "latency",
    "budget",
    "memory",
    "token",
    "format",
    "review",
    "constraint",
    "example",
    "step",
    "rule",
)


@dataclass(frozen=True, slots=True)
class DemoSpec:
    agents: int = 6
    tool_agents: int = 3
    sessions: int = 48
    concurrency: int = 16
    steps: tuple[int, int] = (5, 8)
    predictability: float = 0.85
    anchor_words: tuple[int, int] = (560, 760)
    task_words: tuple[int, int] = (40, 90)
    tool_result_words: tuple[int, int] = (40, 100)
    tool_seconds: tuple[float, float] = (0.05, 0.3)
    think_seconds: float = 0.02  # orchestration gap between turns
    max_tokens: int = 48
    max_tool_rounds: int = 2
    model: str = ""
    seed: int = 7
    cache_salt: str | None = None  # vLLM cache_salt on every request (one tenant's isolation domain)
    session_label: str = "session"  # body `user` = f"{session_label}-{sid}"
    session_header: bool = False  # also send X-Session-ID (what routers' session affinity keys on)
    # "agents at work" shape (0/None = the selector chat above): every tool agent's turn makes
    # `tool_rounds` tool calls in a row (tool_choice "required", then "none" for its answer); tool
    # durations are log-uniform over `tool_seconds`; sessions start spread over `start_spread_s`
    tool_rounds: tuple[int, int] | None = None
    tool_log_uniform: bool = False
    start_spread_s: float = 0.0
    # > 0: each tool agent's tools take a characteristic time (log-uniform over `tool_seconds`, fixed
    # per agent and seed), each call that time x uniform(1 - tool_jitter, 1 + tool_jitter)
    tool_jitter: float = 0.0
    # vllm-router program scheduling's canonical identity: body vllm_xargs.agentic_context
    # (program_id = session_id = the session label, step_id = the call's index in the session)
    agentic_context: bool = False
    # > 0: open loop, sessions arrive as a Poisson process at this rate (per s, seeded) whatever
    # is in flight, and `concurrency` is not a cap; 0: closed loop, `concurrency` sessions at once
    arrival_rate: float = 0.0


@dataclass(frozen=True, slots=True)
class Agent:
    name: str
    system: str
    tools: tuple[dict, ...] | None


@dataclass(slots=True)
class RequestRecord:
    agent: str
    session: int
    prompt_tokens: int
    cached_tokens: int
    ttft_s: float | None
    latency_s: float
    finish_reason: str | None
    resumed: bool  # this request resumed after a tool call
    sent_at: float = 0.0  # seconds since the workload started


@dataclass(slots=True)
class WorkloadResult:
    records: list[RequestRecord] = field(default_factory=list)
    turn_latencies: list[float] = field(default_factory=list)
    session_latencies: list[float] = field(default_factory=list)  # a session's start to its last answer
    session_spans: list[float] = field(default_factory=list)  # completed sessions: first call to last answer (s)
    errors: int = 0
    wall_s: float = 0.0


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def build_agents(spec: DemoSpec) -> list[Agent]:
    rng = random.Random(spec.seed)
    agents = []
    for i in range(spec.agents):
        name = ROLES[i % len(ROLES)] + ("" if i < len(ROLES) else str(i))
        body = _words(rng, rng.randint(*spec.anchor_words))
        system = f"You are the {name} of a team of {spec.agents} agents. Rules and context: {body}."
        tools = None
        if i < spec.tool_agents:
            tools = tuple(
                {
                    "type": "function",
                    "function": {
                        "name": f"{name}_{verb}",
                        "description": f"{verb} for the {name}: " + _words(rng, 30),
                        "parameters": {
                            "type": "object",
                            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                            "required": ["query"],
                        },
                    },
                }
                for verb in ("search", "run")
            )
        agents.append(Agent(name, system, tools))
    return agents


def tool_duration(spec: DemoSpec, agent: int, rng: random.Random) -> float:
    """How long agent `agent`'s tool call runs (seconds)."""
    lo, hi = spec.tool_seconds
    if spec.tool_jitter > 0 and lo > 0:
        base = lo * (hi / lo) ** random.Random(spec.seed * 31 + agent).random()
        return base * rng.uniform(1 - spec.tool_jitter, 1 + spec.tool_jitter)
    if spec.tool_log_uniform and lo > 0:
        return lo * (hi / lo) ** rng.random()
    return rng.uniform(lo, hi)


def script_order(spec: DemoSpec) -> list[int]:
    """The supervisor's scripted successor of each agent (a fixed random cycle)."""
    return random_cycle(spec.agents, random.Random(spec.seed + 1))


async def _stream(client: httpx.AsyncClient, url: str, body: dict, headers: dict) -> tuple[dict, float | None, float]:
    """POST a streaming chat request; returns (summary, ttft, latency)."""
    t0 = time.perf_counter()
    ttft = None
    content: list[str] = []
    calls: dict[int, dict] = {}
    summary: dict = {"finish_reason": None, "usage": {}}
    async with client.stream("POST", url, json=body, headers=headers) as resp:
        if resp.status_code != 200:
            await resp.aread()
            raise RuntimeError(f"engine answered {resp.status_code}: {resp.text[:200]}")
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            obj = json.loads(data)
            if obj.get("usage"):
                summary["usage"] = obj["usage"]
            for ch in obj.get("choices") or ():
                delta = ch.get("delta") or {}
                if ttft is None and (delta.get("content") or delta.get("tool_calls")):
                    ttft = time.perf_counter() - t0
                if delta.get("content"):
                    content.append(delta["content"])
                for tc in delta.get("tool_calls") or ():
                    slot = calls.setdefault(
                        tc.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                    )
                    slot["id"] = tc.get("id") or slot["id"]
                    fn = tc.get("function") or {}
                    slot["function"]["name"] += fn.get("name") or ""
                    slot["function"]["arguments"] += fn.get("arguments") or ""
                if ch.get("finish_reason"):
                    summary["finish_reason"] = ch["finish_reason"]
    summary["content"] = "".join(content)
    summary["tool_calls"] = [calls[i] for i in sorted(calls)]
    return summary, ttft, time.perf_counter() - t0


async def _session(
    client: httpx.AsyncClient,
    url: str,
    spec: DemoSpec,
    sid: int,
    agents: list[Agent],
    script: list[int],
    model: str,
    headers: dict,
    out: WorkloadResult,
    tick: Callable[[], None],
    t0: float = 0.0,
) -> None:
    rng = random.Random(spec.seed * 1000 + sid)
    task = {"role": "user", "content": f"Task {sid}: " + _words(rng, rng.randint(*spec.task_words))}
    if spec.session_header:
        headers = {**headers, "x-session-id": f"{spec.session_label}-{sid}"}
    transcript: list[dict] = []
    cur: int | None = None
    calls = 0
    started = finished = time.perf_counter()
    for _step in range(rng.randint(*spec.steps)):
        if cur is None:
            cur = rng.randrange(spec.agents)
        else:
            cur = script[cur] if rng.random() < spec.predictability else rng.randrange(spec.agents)
        agent = agents[cur]
        own: list[dict] = []
        turn_s = 0.0
        rounds = spec.max_tool_rounds
        if spec.tool_rounds is not None:
            rounds = rng.randint(*spec.tool_rounds) if agent.tools else 0
        for round_ in range(rounds + 1):
            body: dict = {
                "model": model,
                "messages": [{"role": "system", "content": agent.system}, task, *transcript, *own],
                "max_tokens": spec.max_tokens,
                "stream": True,
                "stream_options": {"include_usage": True},
                "temperature": 0,
                "user": f"{spec.session_label}-{sid}",
            }
            if spec.cache_salt:
                body["cache_salt"] = spec.cache_salt
            if spec.agentic_context:
                label = f"{spec.session_label}-{sid}"
                body["vllm_xargs"] = {"agentic_context": {"program_id": label, "session_id": label, "step_id": calls}}
            calls += 1
            if agent.tools:
                body["tools"] = list(agent.tools)
                if spec.tool_rounds is not None:
                    body["tool_choice"] = "required" if round_ < rounds else "none"
                else:
                    body["tool_choice"] = "auto" if round_ < rounds else "none"
            sent = time.perf_counter() - t0
            try:
                summary, ttft, latency = await _stream(client, url, body, headers)
            except (httpx.HTTPError, RuntimeError, ValueError):
                out.errors += 1
                tick()
                return
            turn_s += latency
            usage = summary["usage"] or {}
            details = usage.get("prompt_tokens_details") or {}
            out.records.append(
                RequestRecord(
                    agent.name,
                    sid,
                    int(usage.get("prompt_tokens") or 0),
                    int(details.get("cached_tokens") or 0),
                    ttft,
                    latency,
                    summary["finish_reason"],
                    round_ > 0,
                    sent,
                )
            )
            tick()
            if summary["finish_reason"] != "tool_calls" or not summary["tool_calls"]:
                transcript.append({"role": "user", "name": agent.name, "content": summary["content"] or "(done)"})
                break
            own.append(
                {"role": "assistant", "content": summary["content"] or None, "tool_calls": summary["tool_calls"]}
            )
            await asyncio.sleep(tool_duration(spec, cur, rng))
            for call in summary["tool_calls"]:
                own.append(
                    {
                        "role": "tool",
                        "tool_call_id": call["id"],
                        "content": "result: " + _words(rng, rng.randint(*spec.tool_result_words)),
                    }
                )
        out.turn_latencies.append(turn_s)
        finished = time.perf_counter()
        await asyncio.sleep(spec.think_seconds)
    out.session_latencies.append(time.perf_counter() - started)
    if calls:
        out.session_spans.append(finished - started)


async def run_workload(
    base_url: str, spec: DemoSpec, *, model: str, headers: dict | None = None, tick: Callable[[], None] = lambda: None
) -> WorkloadResult:
    """Run every session against `base_url` (engine or proxy) with `spec.concurrency` at once."""
    agents = build_agents(spec)
    script = script_order(spec)
    out = WorkloadResult()
    url = base_url.rstrip("/") + "/v1/chat/completions"
    cap = spec.sessions if spec.arrival_rate > 0 else spec.concurrency
    sem = asyncio.Semaphore(max(1, cap))
    starts = [0.0] * spec.sessions
    if spec.arrival_rate > 0:
        arrivals = random.Random(spec.seed * 7919 + 1)
        for sid in range(1, spec.sessions):
            starts[sid] = starts[sid - 1] + arrivals.expovariate(spec.arrival_rate)
    limits = httpx.Limits(max_connections=max(1, cap) * 2, max_keepalive_connections=max(1, cap) * 2)
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0), limits=limits) as client:

        async def one(sid: int) -> None:
            delay = starts[sid]
            if spec.start_spread_s > 0:
                delay += random.Random(spec.seed * 7919 + sid).uniform(0, spec.start_spread_s)
            if delay > 0:
                await asyncio.sleep(delay)
            async with sem:
                await _session(client, url, spec, sid, agents, script, model, headers or {}, out, tick, t0)

        await asyncio.gather(*(one(s) for s in range(spec.sessions)))
    out.wall_s = time.perf_counter() - t0
    return out


def expected_requests(spec: DemoSpec) -> int:
    """Rough request count for the progress bar (steps are drawn per session; tool rounds add some)."""
    mean_steps = (spec.steps[0] + spec.steps[1]) / 2
    if spec.tool_rounds is not None:
        rounds = (spec.tool_rounds[0] + spec.tool_rounds[1]) / 2
        return int(spec.sessions * mean_steps * (1 + rounds * spec.tool_agents / max(1, spec.agents)))
    return int(spec.sessions * mean_steps * (1 + 0.5 * spec.tool_agents / max(1, spec.agents)))
