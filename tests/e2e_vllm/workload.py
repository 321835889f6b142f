"""The scripted multi-agent workflow the e2e checks drive through vLLM (direct) and the proxy.

Why scripted and deterministic: the same bytes must go to vLLM in the direct run and in the proxy
run, so that the only difference between the two is the proxy. A random-weight model's replies
would differ between runs (and are gibberish), so each agent's "result" that later agents see is
generated here from a seed, as a framework would append a tool or agent output. The model's own
replies are still produced (real decode) and measured, just not fed back.

Shape: a selector-style group chat. Each session is one conversation (one `x-session-id`) that
goes round the agents in a fixed order for `rounds` rounds; every agent has its own long system
prompt and its own tools (its anchor, ~18 blocks of 32 tokens), and sees the task plus a window of
the latest messages. With four anchors the anchors alone fill the small cache the job configures,
so under plain LRU an agent's anchor is gone by the time its turn comes round again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

WORDS = [
    "plan",
    "verify",
    "source",
    "cache",
    "token",
    "budget",
    "review",
    "patch",
    "test",
    "module",
    "design",
    "branch",
    "merge",
    "result",
    "query",
    "index",
    "table",
    "vector",
    "graph",
    "node",
    "edge",
    "latency",
    "throughput",
    "memory",
    "buffer",
    "schedule",
    "retry",
    "timeout",
    "error",
    "report",
    "metric",
    "score",
    "rank",
    "filter",
    "search",
    "fetch",
    "parse",
    "render",
    "encode",
    "decode",
    "check",
    "audit",
    "policy",
    "agent",
    "tool",
    "call",
    "reply",
    "summary",
    "draft",
    "final",
    "answer",
    "step",
    "goal",
    "task",
    "user",
    "context",
    "window",
    "prefix",
    "block",
    "chain",
    "hash",
    "value",
    "state",
    "session",
    "model",
    "prompt",
    "output",
    "input",
    "careful",
    "precise",
    "brief",
    "clear",
    "robust",
    "safe",
    "fast",
    "small",
    "large",
    "stable",
    "exact",
    "simple",
    "direct",
]


def text(seed: str, n_words: int) -> str:
    """Deterministic filler prose: same seed, same text, on every machine."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n_words:
        k = rng.randint(6, 14)
        sent = [rng.choice(WORDS) for _ in range(k)]
        sent[0] = sent[0].capitalize()
        out.extend(sent)
        out[-1] += "."
    return " ".join(out[:n_words])


@dataclass(frozen=True)
class Agent:
    name: str
    system: str
    tools: tuple[dict, ...]

    def anchor_messages(self) -> list[dict]:
        return [{"role": "system", "content": self.system}]


def make_agent(name: str, words: int = 150) -> Agent:
    system = f"You are the {name} agent of a software team. Follow these rules exactly.\n" + text(f"sys:{name}", words)
    tools = tuple(
        {
            "type": "function",
            "function": {
                "name": f"{name}_{verb}",
                "description": f"{verb} for the {name}: " + text(f"tool:{name}:{verb}", 14),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": text(f"arg:{name}:{verb}", 6)},
                        "limit": {"type": "integer"},
                    },
                    "required": ["query"],
                },
            },
        }
        for verb in ("search", "run")
    )
    return Agent(name=name, system=system, tools=tools)


AGENT_NAMES = ("planner", "researcher", "coder", "critic")


def make_agents(names: tuple[str, ...] = AGENT_NAMES, words: int = 150) -> list[Agent]:
    return [make_agent(n, words) for n in names]


@dataclass
class Turn:
    """One request of the workflow: who speaks, in which session, with which messages."""

    session: str
    agent: Agent
    messages: list[dict]
    index: int  # position in the whole workflow
    round: int


@dataclass
class Workflow:
    agents: list[Agent]
    sessions: int = 6
    rounds: int = 2
    task_words: int = 60
    result_words: int = 45
    window: int = 4  # latest agent results each request sees
    tag: str = "wf"
    turns: list[Turn] = field(default_factory=list)

    def build(self) -> Workflow:
        self.turns = []
        for s in range(self.sessions):
            sid = f"{self.tag}-s{s}"
            task = {"role": "user", "content": f"Task {sid}: " + text(f"task:{sid}", self.task_words)}
            results: list[dict] = []
            for r in range(self.rounds):
                for agent in self.agents:
                    msgs = [*agent.anchor_messages(), task, *results[-self.window :]]
                    self.turns.append(Turn(sid, agent, msgs, len(self.turns), r))
                    results.append(
                        {
                            "role": "user",
                            "content": f"[{agent.name} round {r}] "
                            + text(f"res:{sid}:{agent.name}:{r}", self.result_words),
                        }
                    )
        return self

    def body(self, turn: Turn, model: str, max_tokens: int = 8, salt: str | None = None) -> dict:
        body: dict = {
            "model": model,
            "messages": turn.messages,
            "tools": list(turn.agent.tools),
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if salt:
            body["cache_salt"] = salt
        return body
