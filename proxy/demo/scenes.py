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

from proxy.harness.workload import DemoSpec


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

SCENES: tuple[Scene, ...] = (AGENTS_AT_WORK, SATURATED)


def scaled(scene: Scene, sessions: int | None = None, time_scale: float = 1.0) -> Scene:
    """The scene with fewer sessions and/or shorter tool pauses (tests, quick looks)."""
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
