"""The demo's two scenes: the regime CacheScout is for, and the regime where it must stay out of the way.

Why two: a proxy that keeps an engine's prefix cache warm pays when agents pause for tools while
other sessions run (the pause outlives the cache, the engine has slack to bring the context back
before the resume), and it has nothing to give when the requests in flight alone overflow the
cache and the engine has no slack (every warm would evict something running and queue in front of
a client). Each scene is one app — a team of agents working on many tasks at once, each turn a
few tool calls in a row — with the engine and load that make one regime or the other. The
parameters and their sources: docs/demo.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from proxy.bench.claude_code_live import scaled_policy
from proxy.harness.workload import DemoSpec

CLAUDE_CODE_DATA = Path(__file__).parent / "data" / "claude_code"


@dataclass(frozen=True, slots=True)
class TraceWorkload:
    """A scene driven by recorded sessions (`proxy.bench.claude_code_live`) instead of `DemoSpec`:
    the files in `path`, composed per seed (`compose(..., seed)`: the users' start offsets), their
    arrivals and think times x `time_scale`; the engine runs at speed 1 / `time_scale`."""

    path: Path
    window_s: float  # users start uniform over this (trace s)
    horizon_s: float  # requests after this are dropped (trace s)
    time_scale: float
    max_tokens: int = 32
    max_seeds: int = 4  # seeds of this scene at most (one group: its pairs are the heaviest)


@dataclass(frozen=True, slots=True)
class Scene:
    name: str  # JSON key: scenes.<name>
    title: str
    spec: DemoSpec
    cache_blocks: int  # engine prefix cache, 16-token blocks
    prefill_tps: float  # engine prefill throughput, tokens/s
    output_tokens: int = 8  # typical answer length
    max_num_seqs: int = 256
    policy: dict[str, float] = field(default_factory=dict)  # PolicyConfig overrides (documented)
    note: str = ""
    trace: TraceWorkload | None = None  # recorded sessions instead of `spec`'s app
    speed: float = 1.0  # engine --speed (virtual seconds per wall second)
    max_model_len: int = 0  # engine --max-model-len (0 = its default)


# The app: 6 agents (planner, researcher, coder, tester, critic, writer), each with two tools; a
# task runs 1-2 agent turns, each turn two tool calls in a row (a coding agent reading a file, then
# running the tests) and then the agent's answer; a tool result of 100-250 words stays in the
# agent's context until its answer. Each agent's tools take a characteristic time, log-uniform
# over the scene's range across agents, +-25% per call. Sources and reasoning: docs/demo.md.
APP = DemoSpec(
    agents=6,
    tool_agents=6,
    sessions=24,
    concurrency=24,
    steps=(1, 1),
    predictability=0.85,
    anchor_words=(150, 250),
    task_words=(200, 400),
    tool_result_words=(100, 250),
    tool_seconds=(5.0, 12.0),
    tool_jitter=0.25,
    tool_rounds=(2, 2),
    think_seconds=0.3,
    max_tokens=48,
    start_spread_s=8.0,
)

AGENTS_AT_WORK = Scene(
    name="agents_at_work",
    title="agents at work (tool pauses outlive the cache, which holds the running set; engine with slack)",
    spec=APP,
    cache_blocks=750,
    prefill_tps=6000.0,
    policy={"warmup_tokens_per_s": 900.0, "warmup_burst_tokens": 6000.0},
)

SATURATED = Scene(
    name="saturated",
    title="saturated (engine overloaded, the requests in flight overflow the cache)",
    spec=replace(APP, sessions=12, concurrency=12, tool_seconds=(0.5, 2.0), start_spread_s=1.0),
    cache_blocks=160,
    prefill_tps=4000.0,
    policy={"warmup_tokens_per_s": 600.0, "warmup_burst_tokens": 4000.0},
)

# Real coding-agent sessions: four Claude Code sessions (callanjfox/kv-cache-tester, Apache-2.0:
# data/claude_code/NOTICE), each a user of one engine, their first 250 s (~50 requests, prompts of
# 10k-33k tokens with a fixed tools + system head of ~10-15k tokens each, tool loops of seconds).
# The cache (3,000 x 16 = 48k tokens) holds about two of their contexts: where the choice of
# whose paused context to keep matters (issue 37; the shared README's table). Time runs 1/0.15 =
# 6.7x as fast: think times and arrivals x 0.15, the engine at that speed (its modelled prefill,
# 15k tokens/s plus attention), the proxy's timers x 0.15 (`scaled_policy`). Two seeds (the users'
# start offsets): its pairs are the demo's heaviest on the CPUs.
CODING_TIME_SCALE = 0.15
CODING_AGENTS = Scene(
    name="coding_agents",
    title="coding agents (real Claude Code sessions, 4 users on one engine; the cache holds about 2 contexts)",
    spec=replace(APP, sessions=4, concurrency=4, agents=1, tool_agents=1),
    cache_blocks=3_000,
    prefill_tps=15_000.0,
    output_tokens=16,
    policy=scaled_policy(CODING_TIME_SCALE),
    trace=TraceWorkload(CLAUDE_CODE_DATA, window_s=40.0, horizon_s=250.0, time_scale=CODING_TIME_SCALE, max_seeds=2),
    speed=1.0 / CODING_TIME_SCALE,
    max_model_len=65_536,
)

SCENES: tuple[Scene, ...] = (AGENTS_AT_WORK, SATURATED, CODING_AGENTS)


def scaled(scene: Scene, sessions: int | None = None, time_scale: float = 1.0) -> Scene:
    """The scene with fewer sessions and/or shorter tool pauses (tests, quick looks). A trace scene
    keeps its sessions (its files are the scene); the time scale multiplies its own."""
    if scene.trace is not None:
        if time_scale == 1.0:
            return scene
        tr = replace(scene.trace, time_scale=scene.trace.time_scale * time_scale)
        return replace(
            scene, trace=tr, speed=1.0 / tr.time_scale, policy={**scene.policy, **scaled_policy(tr.time_scale)}
        )
    spec = scene.spec
    if sessions is not None:
        spec = replace(spec, sessions=sessions, concurrency=min(spec.concurrency, sessions))
    if time_scale != 1.0:
        lo, hi = spec.tool_seconds
        spec = replace(
            spec,
            tool_seconds=(lo * time_scale, hi * time_scale),
            start_spread_s=spec.start_spread_s * time_scale,
            think_seconds=spec.think_seconds * time_scale,
        )
    return replace(scene, spec=spec)
