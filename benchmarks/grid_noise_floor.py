"""How far does a grid cell's mean TTFT move when nothing but timing changes? (a benchmark)

    PYTHONPATH=$PWD .venv/bin/python benchmarks/grid_noise_floor.py CELLS.txt [--draws 5] [--touches N]

A cell's "scout-proxy is > 1% worse than LRU" is one run of one stream. At high load the simulated
engine is sensitive: an action of a few milliseconds shifts which requests share a step, and a
burst's queue reorders. This measures that floor with no policy at all: `lru` plus N *null touches*
(a one-block `max_tokens=1` request on a fresh hash, so nothing in the cache is kept or pushed out
beyond one block) at uniformly random times, over several draws. The spread of mean TTFT × LRU
across draws is the cell's noise floor for a policy that sends N small actions; a harm below it
cannot be told from timing alone. N defaults to the number of actions scout-proxy executes in the
cell (what its harm figure is made of).

CELLS.txt: one cell per line, `preset pause busy cache_x` (default grid's names).
"""

from __future__ import annotations

import math
import random
import statistics
import sys

from proxy.replay.grid import GRIDS, ref_running_set, spec_for
from proxy.replay.policies import LruPolicy
from proxy.replay.runner import ReplaySettings, make_policy, run_policy
from proxy.replay.workloads import generate


class NullTouchLru(LruPolicy):
    """LRU, plus one-block touches on fresh hashes at the given times: timing noise, no cache effect."""

    name = "lru-null-touches"

    def __init__(self, times: list[float], block_size: int, seed: int) -> None:
        self.times = sorted(times)
        self.k = 0
        self.bs = block_size
        self.rng = random.Random(seed)
        self.sent = 0

    def next_wakeup(self) -> float:
        return self.times[self.k] if self.k < len(self.times) else math.inf

    def wakeup(self, now: float) -> None:
        while self.k < len(self.times) and self.times[self.k] <= now:
            self.k += 1
            h = self.rng.getrandbits(62) | (1 << 62)  # never a trace block's hash
            self.sent += self.driver.submit_action("touch", "null", [h], self.bs, now)


def cell(preset: str, pause: str, busy: float, x: float, draws: int, touches: int | None) -> dict:
    g = GRIDS["default"]
    gp = next(p for p in g.presets if p.name == preset)
    rs = ref_running_set(g, gp, pause)
    spec = spec_for(gp, pause, busy, g.seed)
    reqs = generate(spec)
    st = ReplaySettings(block_size=spec.block_size, latency_budget_s=gp.budget_s)
    cap = max(1, round(x * rs))

    def mean_ttft(pol) -> float:
        return float(run_policy(pol, reqs, cap, st.cost, None, 1, 0, spec.block_size).ttft.mean())

    lru = mean_ttft(make_policy("lru", st))
    scout_pol = make_policy("scout-proxy", st)
    scout = mean_ttft(scout_pol) / lru
    n = touches if touches is not None else int(scout_pol.extra().get("executed") or 0)
    t0, t1 = reqs[0].t, reqs[-1].t
    ratios = []
    for d in range(draws):
        rng = random.Random(1000 + d)
        ratios.append(mean_ttft(NullTouchLru([rng.uniform(t0, t1) for _ in range(n)], spec.block_size, d)) / lru)
    return {"scout": scout, "n": n, "null": ratios}


def main(argv: list[str]) -> None:
    draws = int(argv[argv.index("--draws") + 1]) if "--draws" in argv else 5
    touches = int(argv[argv.index("--touches") + 1]) if "--touches" in argv else None
    with open(argv[0]) as f:
        cells = [line.split() for line in f if line.strip() and not line.startswith("#")]
    print("| cell | scout-proxy TTFT × LRU | null touches | LRU + null touches × LRU: min / median / max |")
    print("| --- | --- | --- | --- |")
    for preset, pause, busy, x in cells:
        r = cell(preset, pause, float(busy), float(x), draws, touches)
        z = r["null"]
        print(
            f"| {preset} {pause} ×{x} busy {busy} | {r['scout']:.3f} | {r['n']} | "
            f"{min(z):.3f} / {statistics.median(z):.3f} / {max(z):.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
