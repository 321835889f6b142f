"""The ceiling of the demo's scene 1, live: what keeping every prefix would give (issue 25).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/demo_ceiling.py [FACTOR] [SEEDS]   # default 100 1,2,3

Runs `cachescout demo`'s scene-1 pair (proxy.demo.pair.run_pair: two identical simulated engines
at once, one straight, one behind a `--passthrough` proxy — the same hop, no policy) with the
second engine's cache FACTOR times larger, so every prefix stays cached there. Prints, per seed,
direct → kept-everything for mean TTFT, tool-resume TTFT, per-turn latency, session time and the
resume hit rate. A policy on a stock LRU engine can at best approach these figures (~30 s a seed).
"""

from __future__ import annotations

import dataclasses
import secrets
import sys

import proxy.demo.pair as pair
from proxy.demo.pair import PairOptions, run_pair
from proxy.demo.scenes import AGENTS_AT_WORK, Scene

KEYS = ("ttft_mean_s", "ttft_resume_mean_s", "turn_mean_s", "session_mean_s")


def main(factor: float, seeds: list[int]) -> None:
    started = {"n": 0}
    engine_cmd = pair.engine_cmd

    def bigger_second(scene: Scene, port: int, seed: int, cpu_blocks: int) -> list[str]:
        started["n"] += 1
        if started["n"] % 2 == 0:  # run_pair starts the direct engine first, the proxied one second
            scene = dataclasses.replace(scene, cache_blocks=int(scene.cache_blocks * factor))
        return engine_cmd(scene, port, seed, cpu_blocks)

    pair.engine_cmd = bigger_second
    for seed in seeds:
        opts = PairOptions(policy={}, proxy_sets=(), passthrough=True, admin_token=secrets.token_hex(8))
        r = run_pair(AGENTS_AT_WORK, seed, opts)
        d, k = r["direct"], r["proxy"]
        rows = [f"{key} {d[key] * 1e3:.0f} -> {k[key] * 1e3:.0f} ms ({k[key] / d[key] - 1:+.1%})" for key in KEYS]
        rows.append(f"resume hit {d['resume_hit_rate']:.0%} -> {k['resume_hit_rate']:.0%}")
        print(f"seed {seed} (cache x{factor:g}): " + "; ".join(rows), flush=True)


if __name__ == "__main__":
    main(
        float(sys.argv[1]) if len(sys.argv) > 1 else 100.0,
        [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "1,2,3").split(",")],
    )
