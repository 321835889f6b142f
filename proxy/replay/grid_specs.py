"""The grids' definitions: named grids (`GRIDS`), their presets and how a cell's workload and cost
model are built (`spec_for`, `cost_for`). Split from grid.py, which runs them; every name here is
re-exported there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.cachemodel.cost_model import CostModel
from proxy.replay import regimes
from proxy.replay.workloads import generate, preset


@dataclass(frozen=True)
class GridPreset:
    name: str
    sessions: int
    budget_s: float  # p99 TTFT budget for the re-planned throughput
    # a named variant of a preset (the `demo` grid's scenes, issue 25); the defaults keep the other grids
    workload: str = ""  # the workload preset generated (default: `name`)
    overrides: tuple[tuple[str, Any], ...] = ()  # WorkloadSpec fields set over the preset
    prefill_tps: float | None = None  # the cost model's prefill rate (engine and measurements); None: its default
    capacity_blocks: tuple[int, ...] = ()  # absolute capacities instead of the grid's cache_x × running set
    busy: tuple[float, ...] = ()  # this preset's busy levels instead of the grid's


@dataclass(frozen=True)
class GridSpec:
    presets: tuple[GridPreset, ...]
    busy: tuple[float, ...] = (0.3, 0.5, 0.7, 0.9)
    cache_x: tuple[float, ...] = (1.0, 2.0, 4.0)  # capacity / running-set p90 at `ref_busy`
    pauses: tuple[str, ...] = ("fast", "slow")
    ref_busy: float = 0.7
    extra_busy: tuple[float, ...] = (1.5, 2.5)  # ladder levels above the grid, run only when needed
    seed: int = 0


# pause profile "own": the preset's own tool times (no `regimes.PAUSES` mixture applied)
OWN_PAUSES = "own"


GRIDS: dict[str, GridSpec] = {
    "default": GridSpec(
        presets=(
            GridPreset("coding-agent", 32, 10.0),  # 10–60k-token prompts: an 8 s cold prefill at 60k
            GridPreset("chat-agents", 480, 2.0),
            GridPreset("swebench", 40, 2.0),
            GridPreset("gaia", 48, 2.0),
        )
    ),
    "quick": GridSpec(
        presets=(GridPreset("swebench", 6, 2.0), GridPreset("chat-agents", 24, 2.0)),
        busy=(0.5, 0.9),
        cache_x=(1.0, 3.0),
        pauses=("fast",),
        extra_busy=(1.5,),
    ),
    # the live demo's two scenes (proxy/demo/scenes.py, docs/demo.md "The matching replay cells"):
    # the `demo-app` preset on the scene's engine (prefill rate, cache blocks), its own tool times;
    # busy is offered work at a perfect cache: the demo's 8 s / 1 s start spreads are ~0.22 / ~1.1
    "demo": GridSpec(
        presets=(
            GridPreset(
                "demo-agents-at-work",
                24,
                2.0,
                workload="demo-app",
                prefill_tps=6000.0,
                capacity_blocks=(750,),
                busy=(0.15, 0.22, 0.3),
            ),
            GridPreset(
                "demo-saturated",
                12,
                2.0,
                workload="demo-app",
                overrides=(("tool_seconds", (0.5, 2.0)), ("prefill_tokens_per_s", 4000.0)),
                prefill_tps=4000.0,
                capacity_blocks=(160,),
                busy=(1.1,),
            ),
        ),
        busy=(),
        cache_x=(),
        pauses=(OWN_PAUSES,),
        ref_busy=0.22,
        extra_busy=(),
    ),
}


def spec_for(gp: GridPreset, pause: str, busy: float, seed: int):
    """The cell's workload: the preset with the pause profile and the busy share applied."""
    name = gp.workload or gp.name
    base = preset(name, **dict(gp.overrides))
    over: dict = {"sessions": gp.sessions, "busy": busy, "seed": seed}
    if base.tool_prob > 0 and pause != OWN_PAUSES:
        over["pause_mix"] = regimes.PAUSES[pause]
    scale = regimes.GAP_SCALE.get(pause, 1.0)
    if base.gap_mix:
        over["gap_mix"] = tuple((w, lo * scale, hi * scale) for w, lo, hi in base.gap_mix)
    elif scale != 1.0:
        over["gap_seconds"] = base.gap_seconds * scale
    return preset(name, **dict(gp.overrides), **over)


def cost_for(gp: GridPreset) -> CostModel:
    """The cost model of a preset's cells: the default one, or at the preset's prefill rate."""
    return CostModel() if gp.prefill_tps is None else CostModel(prefill_token_s=1.0 / gp.prefill_tps)


def ref_running_set(g: GridSpec, gp: GridPreset, pause: str, seed: int | None = None) -> int:
    """The running set's p90 (distinct blocks in flight) at the grid's reference busy level: the
    unit of a cell's capacity (`cache_x` × this). A preset with its own busy levels uses the middle
    one. `seed`: the grid's unless given."""
    ref = gp.busy[len(gp.busy) // 2] if gp.busy else g.ref_busy
    reqs = generate(spec_for(gp, pause, ref, g.seed if seed is None else seed))
    return int(regimes.running_set(reqs, cost_for(gp))["blocks_p90"])
