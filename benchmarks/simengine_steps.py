"""Steps per second of `SimEngine` in virtual time (no HTTP): the cost the replay pays per step.

Workload: N agents, each sending `turns` requests that extend their own conversation (shared
prefix + growing history), Poisson-ish arrivals, answers of 64-256 tokens, so decode-only
stretches dominate as in an agent trace. Prints virtual seconds simulated, engine steps, wall
and CPU seconds, steps and requests per CPU second (CPU time: the dev machine is shared, wall time
swings with its load). With --fast, the driver uses `SimEngine.fast_forward` (when the
engine has it) for decode-only stretches up to the next arrival.

    PYTHONPATH=$PWD python benchmarks/simengine_steps.py --requests 2000 [--fast]
    PYTHONPATH=$PWD python benchmarks/simengine_steps.py --decode-stretch [--fast]
"""

from __future__ import annotations

import argparse
import random
import time

from proxy.simengine.engine import EngineConfig, EngineRequest, SimEngine


def workload(n: int, seed: int) -> list[tuple[float, list[int], int]]:
    rng = random.Random(seed)
    agents = [list(range(a * 100_000, a * 100_000 + rng.randint(500, 3000))) for a in range(32)]
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(4.0)
        a = rng.randrange(len(agents))
        agents[a] = agents[a] + [rng.randrange(3, 120_000) for _ in range(rng.randint(50, 400))]
        if len(agents[a]) > 12_000:
            agents[a] = agents[a][:2000]
        out.append((t, list(agents[a]), rng.randint(64, 256)))
    return out


def run(n: int, seed: int, fast: bool, capacity: int) -> dict:
    eng = SimEngine(EngineConfig(capacity_blocks=capacity))
    reqs = workload(n, seed)
    ff = getattr(eng, "fast_forward", None) if fast else None
    now, i, steps, submit_cpu = 0.0, 0, 0, 0.0
    t0, c0 = time.perf_counter(), time.process_time()
    while i < len(reqs) or eng.has_work:
        while i < len(reqs) and reqs[i][0] <= now:
            _, prompt, out = reqs[i]
            s0 = time.process_time()
            eng.submit(EngineRequest(i, prompt, list(range(5, 5 + out))), reqs[i][0])
            submit_cpu += time.process_time() - s0
            i += 1
        if not eng.has_work:
            now = reqs[i][0]
            continue
        horizon = reqs[i][0] if i < len(reqs) else float("inf")
        res = ff(now, horizon) if ff is not None else None
        if res is None:
            res = eng.step(now)
        assert res is not None
        steps += getattr(res, "steps", 1)
        now = res.end
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {
        "requests": n,
        "virtual_s": round(now, 1),
        "steps": steps,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "submit_cpu_s": round(submit_cpu, 2),  # hashing the prompts' blocks
        "steps_per_cpu_s": round(steps / cpu),
        "steps_per_step_cpu_s": round(steps / (cpu - submit_cpu)),
        "requests_per_cpu_s": round(n / cpu),
        "preemptions": getattr(eng, "num_preemptions", 0),
        "hit_tokens": eng.prompt_tokens_hit,
    }


def decode_stretch(fast: bool, running: int = 64, output: int = 1000) -> dict:
    """`running` requests decoding `output` tokens with nothing arriving: the stretch fast_forward is for."""
    eng = SimEngine(EngineConfig(capacity_blocks=28_672))
    for i in range(running):
        eng.submit(EngineRequest(i, list(range(i * 10_000, i * 10_000 + 2000)), list(range(5, 5 + output))), 0.0)
    now = 0.0
    while (eng.has_work and any(r.prefilling for r in eng.running)) or eng.waiting:
        now = eng.step(now).end  # type: ignore[union-attr]
    c0, s0 = time.process_time(), eng.steps
    while eng.has_work:
        res = (eng.fast_forward(now) if fast else None) or eng.step(now)
        assert res is not None
        now = res.end
    cpu = time.process_time() - c0
    return {"decode_steps": eng.steps - s0, "cpu_s": round(cpu, 3), "steps_per_cpu_s": round((eng.steps - s0) / cpu)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--capacity-blocks", type=int, default=4096)
    p.add_argument("--fast", action="store_true")
    p.add_argument("--decode-stretch", action="store_true", help="64 requests decoding 1,000 tokens, no arrivals")
    a = p.parse_args()
    if a.decode_stretch:
        print(decode_stretch(a.fast))
    else:
        print(run(a.requests, a.seed, a.fast, a.capacity_blocks))


if __name__ == "__main__":
    main()
