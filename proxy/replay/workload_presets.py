"""The workload parameters (``WorkloadSpec``) and the documented presets (``PRESETS``).

Why a module of its own: the generator (workloads.py) turns a spec into a request stream; what
each preset stands for — the paper's topologies and benchmarks, the calibrated regimes, the demo's
app — is a table that grows on its own. ``proxy.replay.workloads`` re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from proxy.replay.workloads_demo import DEMO_APP

TOPOLOGIES = ("pipeline", "debate", "selector", "random", "solo")


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    name: str = "selector"
    topology: str = "selector"
    agents: int = 6
    predictability: float = 0.85  # selector: P(supervisor follows the script); random ignores it
    anchor_tokens: tuple[int, int] = (640, 960)  # per-agent fixed context (system prompt + tools)
    task_tokens: tuple[int, int] = (60, 200)  # the user's opening message
    reply_tokens: tuple[int, int] = (40, 160)  # each agent turn appended to the shared history
    steps: tuple[int, int] = (8, 14)  # agent turns per session
    sessions: int = 64
    load: float | None = 0.8  # target engine load: cold prefill seconds / span
    concurrency: float = 16.0  # mean live sessions, used when load is None
    tool_agents: int = 0  # agents 1..tool_agents may call tools
    tool_prob: float = 0.0  # P(a tool agent's turn ends in a tool call)
    tool_seconds: tuple[float, float] = (0.5, 4.0)  # tool duration range (log-uniform)
    tool_result_tokens: tuple[int, int] = (100, 400)
    selector_calls: bool = False  # the supervisor itself makes an LLM call per step
    second_user_turn: bool = False  # mt-bench: a follow-up question mid-session
    block_size: int = 16
    gap_seconds: float = 0.05  # orchestration gap between turns
    decode_tokens_per_s: float = 140.0  # nominal per-stream decode (cost model at batch 16)
    prefill_tokens_per_s: float = 15000.0  # nominal prefill speed (cost model default)
    seed: int = 0
    fanout: int = 0  # >1: a turn may fork into this many parallel branches
    fanout_prob: float = 0.0  # P(a turn forks): map steps, parallel tool calls
    fanout_stagger_s: float = 0.3  # delay between the branches' starts
    branch_tokens: tuple[int, int] = (32, 96)  # each branch's own instruction after the shared parent
    # --- regime parameters (issue 21); every default keeps the presets above bit-identical
    busy: float | None = None  # target engine busy share at a perfect cache (prefill + decode work /
    # span, cost model); overrides `load` when set (see `regimes.py`)
    tool_from: int = 1  # agents tool_from..tool_agents may call tools ("solo" agents: 0)
    pause_mix: tuple[tuple[float, float, float], ...] = ()  # tool durations: (weight, lo s, hi s)
    # log-uniform mixture; empty: `tool_seconds`
    gap_mix: tuple[tuple[float, float, float], ...] = ()  # think/orchestration gap after a turn, same
    # form; empty: the constant `gap_seconds`
    user_tokens: tuple[int, int] = (0, 0)  # a user message appended before every turn after the first
    max_context_tokens: int = 0  # >0: a session ends before a prompt could pass this size
    # --- the demo's app (issue 25, `workloads_demo.py`); every default keeps the presets above bit-identical
    tool_rounds: int = 0  # >0: a tool agent's turn is exactly this many tool calls in a row, then its answer
    agent_tool_jitter: float = 0.0  # per-agent characteristic tool time (log-uniform over tool_seconds
    # across agents), each call x uniform(1 - jitter, 1 + jitter)
    start_spread_s: float = 0.0  # sessions start uniformly within this window (busy None)


PRESETS: dict[str, WorkloadSpec] = {
    # topology presets: the paper's four workflow shapes on the same 6 agents
    "pipeline": WorkloadSpec(name="pipeline", topology="pipeline", steps=(6, 12)),
    "debate": WorkloadSpec(name="debate", topology="debate", predictability=0.8),
    "selector": WorkloadSpec(name="selector", topology="selector", predictability=0.85),
    "random": WorkloadSpec(name="random", topology="random", predictability=0.0),
    # workload presets shaped like the paper's benchmarks (6-agent SelectorGroupChat)
    "gsm8k": WorkloadSpec(
        name="gsm8k",
        topology="selector",
        predictability=0.8,
        anchor_tokens=(560, 800),
        task_tokens=(60, 160),
        reply_tokens=(40, 140),
        steps=(6, 10),
        selector_calls=True,
    ),
    "mtbench": WorkloadSpec(
        name="mtbench",
        topology="selector",
        predictability=0.75,
        anchor_tokens=(720, 1040),
        task_tokens=(80, 240),
        reply_tokens=(80, 200),
        steps=(6, 10),
        second_user_turn=True,
        selector_calls=True,
    ),
    "gaia": WorkloadSpec(
        name="gaia",
        topology="selector",
        predictability=0.7,
        anchor_tokens=(1100, 1600),
        task_tokens=(80, 240),
        reply_tokens=(40, 140),
        steps=(8, 14),
        tool_agents=3,
        tool_prob=0.5,
        tool_seconds=(0.5, 8.0),
        tool_result_tokens=(80, 300),
        selector_calls=True,
    ),
    "swebench": WorkloadSpec(
        name="swebench",
        topology="selector",
        predictability=0.75,
        anchor_tokens=(2400, 3600),
        task_tokens=(200, 600),
        reply_tokens=(60, 200),
        steps=(10, 16),
        tool_agents=3,
        tool_prob=0.6,
        tool_seconds=(1.0, 20.0),
        tool_result_tokens=(150, 500),
        sessions=48,
    ),
    # fan-out: a selector chat whose turns fork into 4 parallel branches half of the time (the
    # branches share the agent's anchor and the session's history: the parent)
    "fanout": WorkloadSpec(
        name="fanout",
        topology="selector",
        predictability=0.8,
        steps=(6, 10),
        anchor_tokens=(720, 1040),
        fanout=4,
        fanout_prob=0.5,
        branch_tokens=(16, 48),
    ),
    # regime presets (issue 21): a long-context coding agent and many short chat agents; their pause
    # and think-time mixtures are calibrated in docs/replay.md "Regimes"
    "coding-agent": WorkloadSpec(
        name="coding-agent",
        topology="solo",
        agents=1,
        anchor_tokens=(4000, 6000),  # system prompt + tool schemas of a coding scaffold
        task_tokens=(6000, 9000),  # the issue text and the repository context it opens with
        reply_tokens=(60, 300),
        steps=(10, 22),
        sessions=12,
        tool_from=0,
        tool_agents=0,
        tool_prob=0.9,
        tool_result_tokens=(600, 2400),  # file views, grep hits, test output
        pause_mix=((0.86, 0.05, 1.0), (0.09, 1.0, 10.0), (0.05, 10.0, 120.0)),
        gap_mix=((0.9, 0.02, 0.3), (0.1, 0.3, 2.0)),
        max_context_tokens=60_000,
        block_size=64,  # 10–60k-token prompts: 64-token blocks keep the replay fast (<= 63 tokens lost per prompt)
    ),
    "chat-agents": WorkloadSpec(
        name="chat-agents",
        topology="solo",
        agents=24,  # many assistants, each with its own system prompt
        anchor_tokens=(300, 900),
        task_tokens=(30, 200),
        user_tokens=(20, 160),
        reply_tokens=(80, 320),
        steps=(2, 6),
        sessions=160,
        gap_mix=((0.5, 2.0, 10.0), (0.4, 10.0, 60.0), (0.1, 60.0, 300.0)),  # human think time
    ),
    "demo-app": WorkloadSpec(**DEMO_APP),  # the live demo's app (issue 25, workloads_demo.py)
}
PAPER_PRESETS = ("pipeline", "debate", "selector", "random", "gsm8k", "mtbench", "gaia", "swebench", "fanout")


def preset(name: str, **overrides) -> WorkloadSpec:
    if name not in PRESETS:
        raise KeyError(f"unknown workload preset {name!r}; choose from {sorted(PRESETS)}")
    return replace(PRESETS[name], **overrides)
