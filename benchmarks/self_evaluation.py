"""Benchmark (not a test): the per-request CPU the self-evaluation adds to the live observer.

    .venv/bin/python benchmarks/self_evaluation.py [--requests 3000] [--repeat 5]

What is timed: everything the live observer does for one client request and its response —
on_request, the (here inline) view + observe + plan, the response tap fed one JSON body with
usage, observe_response, usage/conversion counting — and the actions it plans (a fake executor
answers each one at once with engine-style usage, so `on_action_result` runs too). Two observers
are driven with the same traffic in the same process, interleaved run by run:

- **before**: no self-evaluation (no planner gate, no outcome recording, no yield accounting) —
  the observer as it was before issue 11;
- **after_auto**: the `SelfEvaluation` wired exactly as `LiveRuntime` wires it (switchback in auto
  mode, yield ledger on), ticked every 0.25 s of virtual time as the runtime's plan tick does. Windows
  are 1–2 s of virtual time (~500 requests; the defaults are 30–120 s) so that several windows
  open, close and are decided on within the run: this over-weights the per-window work. Its
  observe-only windows plan no actions, which saves work, so also:
- **after_pinned_on**: the same with the switchback pinned on: every action is planned, executed
  and accounted for by the yield ledger (the switchback's per-request recording is then a no-op).

Traffic (virtual time, 3 ms per request): 8 chat agents of the demo workload in a noisy pipeline
over 64 sessions, ~1.2k-token
prompts, a residency capacity that evicts anchors so the planner warms. Per-thread CPU time; the
median and the best (minimum) over repeats of the per-request mean are reported, and each
variant's ratio to before.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from proxy.contracts import RequestContext
from proxy.core import PolicyConfig, ScoutPolicy
from proxy.core.switchback_experiment import SwitchbackConfig
from proxy.core.yield_ledger import YieldConfig
from proxy.engines.base import WarmResult
from proxy.harness.workload import DemoSpec, build_agents
from proxy.observability.metrics import ProxyMetrics
from proxy.runtime.live_policy import LivePolicyObserver
from proxy.runtime.switchback import SelfEvaluation

JSON_HEADERS = {"content-type": "application/json"}


class InstantExecutor:
    """Answers every action at once as an engine would (its prompt, half of it cached)."""

    def __init__(self) -> None:
        self.observer: LivePolicyObserver | None = None
        self.sending = 0

    def submit(self, actions) -> int:
        obs = self.observer
        for a in actions:
            r = WarmResult(ok=True, prompt_tokens=a.tokens, cached_tokens=a.tokens // 2)
            if obs.selfeval is not None:  # as LiveRuntime._on_result does
                obs.note_action(a, r, obs.clock())
            obs.on_action_result(a, r, obs.clock())
        return len(actions)


def build(variant: str, clock) -> LivePolicyObserver:
    cfg = PolicyConfig(residency_capacity_tokens=6000, cooldown_s=0.0, r_min_transitions=8, warmup_tokens_per_s=1e6)
    policy = ScoutPolicy(cfg)
    metrics = ProxyMetrics(CollectorRegistry())
    obs = LivePolicyObserver(policy, metrics, clock, defer=False)
    ex = InstantExecutor()
    ex.observer = obs
    obs.executor = ex
    if variant != "before":
        sb = SwitchbackConfig(
            mode="on" if variant == "after_pinned_on" else "auto",
            window_min_s=1.0,
            window_max_s=2.0,
            burn_in_min_s=0.2,
            decision_windows=6,
            min_window_requests=2,
            start_after_s=0.0,
        )
        se = SelfEvaluation(sb, YieldConfig(), metrics, clock, seed=1, turnover_s=policy.residency.lifetime_s)
        policy.planner.action_gate = se.gate
        obs.selfeval = se
        obs.tick = se.tick  # the runtime's plan tick
    return obs


def traffic(n: int, seed: int) -> list[tuple[int, bytes, dict, bytes]]:
    """(request id, raw body, parsed body, response body) for n requests."""
    rng = random.Random(seed)
    agents = build_agents(DemoSpec(agents=8))
    sess = [rng.randrange(8) for _ in range(64)]
    out = []
    for i in range(n):
        s = rng.randrange(64)
        a = agents[sess[s]]
        sess[s] = (sess[s] + 1) % 8 if rng.random() < 0.85 else rng.randrange(8)
        body = {
            "model": "m",
            "messages": [
                {"role": "system", "content": a.system},
                {"role": "user", "content": f"task {s} " + "x y " * 200},
            ],
            "user": f"s{s}",
        }
        raw = json.dumps(body).encode()
        prompt = len(raw) // 4
        resp = json.dumps(
            {
                "id": f"r{i}",
                "object": "chat.completion",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": 2,
                    "total_tokens": prompt + 2,
                    "prompt_tokens_details": {"cached_tokens": prompt * 9 // 10},
                },
            }
        ).encode()
        out.append((i, raw, body, resp))
    return out


def run(obs: LivePolicyObserver, reqs, wall) -> float:
    """Per-request CPU seconds (mean) for the whole request + response path."""
    tick = getattr(obs, "tick", None)
    next_tick = 0.0
    t0 = time.thread_time()
    for i, raw, body, resp in reqs:
        now = wall()
        ctx = RequestContext(i, "POST", "/v1/chat/completions", JSON_HEADERS, raw, body, now)
        obs.on_request(ctx)
        obs.on_response_start(ctx, 200, JSON_HEADERS, now)
        obs.on_response_chunk(ctx, resp, now)
        obs.on_response_end(ctx, None, now)
        if tick is not None and now >= next_tick:  # the runtime's plan tick: every 0.25 s
            tick(now)
            next_tick = now + 0.25
    return (time.thread_time() - t0) / len(reqs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    reqs = traffic(args.requests, seed=3)
    variants = ("before", "after_auto", "after_pinned_on")
    results: dict[str, list[float]] = {v: [] for v in variants}
    extra = {}
    for r in range(args.repeat):
        order = variants[r % 3 :] + variants[: r % 3]  # rotate the order run by run
        for name in order:
            t = [0.0]

            def wall(t=t):
                t[0] += 0.003  # virtual time: ~330 requests/s
                return t[0]

            obs = build(name, wall)
            results[name].append(run(obs, reqs, wall))
            if name == "after_auto":
                d = obs.selfeval.describe()
                extra = {
                    "windows": d["switchback"]["windows"],
                    "decisions": d["switchback"]["decisions"],
                    "signals_actions": {k: v["actions"] for k, v in d["signals"].items()},
                    "conversions": {k: v["conversions"] for k, v in d["signals"].items()},
                    "actions_emitted": sum(obs.policy.planner.emitted.values()),
                }
    med = {k: statistics.median(v) for k, v in results.items()}
    best = {k: min(v) for k, v in results.items()}  # noise on a shared machine only adds time
    print(
        json.dumps(
            {
                "requests": args.requests,
                "repeat": args.repeat,
                "median_us_per_request": {k: round(v * 1e6, 1) for k, v in med.items()},
                "ratio_vs_before": {k: round(v / med["before"], 3) for k, v in med.items() if k != "before"},
                "best_us_per_request": {k: round(v * 1e6, 1) for k, v in best.items()},
                "best_ratio_vs_before": {k: round(v / best["before"], 3) for k, v in best.items() if k != "before"},
                "runs_us": {k: [round(v * 1e6, 1) for v in vs] for k, vs in results.items()},
                "after_run": extra,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
