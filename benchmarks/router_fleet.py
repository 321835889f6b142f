"""CacheScout behind vllm-router on real sockets: hit ratio and TTFT with vs without, per router policy.

    .venv/bin/python benchmarks/router_fleet.py                       # the default matrix, seeds 7 8 9
    .venv/bin/python benchmarks/router_fleet.py --cases single consistent_hash/sidecar --seeds 7

`single-x2` is the machine-load control: two independent single-engine pairs at once (as many
processes busy as a 2-replica fleet, no router), averaged.

Each case is a pair run at once on two identical fleets (baseline: router → engines; treated: with
CacheScout in the case's topology), on the `cachescout demo` workload (8-agent selector group chat,
tool calls) scaled with the replica count: N replicas get N times the sessions and concurrency, so
each engine sees the load the single engine sees. The single-replica case has no router. Figures,
how warmups landed and the method: proxy/harness/router_fleet.py and docs/deploy.md ("More than one replica").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.harness.router_fleet import FleetConfig, find_router, run_pair
from proxy.harness.workload import DemoSpec

DEFAULT_CASES = (
    "single",
    "round_robin/sidecar",
    "consistent_hash/sidecar",
    "sticky_least_loaded/sidecar",
    "cache_aware/sidecar",
    "kv_aware/sidecar",
    "kv_aware/front",
    "consistent_hash/front",
)


def run_parallel_singles(n: int, spec: DemoSpec, tenants: int, router: str) -> dict:
    """`single-xN`: N independent single-engine pairs at once: the machine-load control for an
    N-replica fleet (as many processes busy, no router), figures averaged over the N."""
    cfg = case_config("single", 1, tenants)
    with ThreadPoolExecutor(max_workers=n) as pool:
        runs = list(pool.map(lambda _: run_pair(cfg, spec, router), range(n)))
    out = runs[0]
    for key in ("hit_gain_pp", "ttft_change", "turn_change"):
        out[key] = statistics.fmean(r[key] for r in runs)
    for side in ("baseline", "cachescout"):
        for key in ("hit_rate", "ttft_mean_s", "turn_mean_s"):
            out[side][key] = statistics.fmean(r[side][key] for r in runs)
        out[side]["errors"] = sum(r[side]["errors"] for r in runs)
    out["landing"]["wrong_replica_share"] = statistics.fmean(r["landing"]["wrong_replica_share"] for r in runs)
    out["landing"]["landed_share"] = statistics.fmean(r["landing"]["landed_share"] for r in runs)
    out["landing"]["warmups"] = sum(r["landing"]["warmups"] for r in runs)
    return out


def case_config(case: str, replicas: int, tenants: int) -> FleetConfig:
    if case == "single":
        return FleetConfig(replicas=1, router_policy=None, topology="sidecar", tenants=tenants)
    policy, _, topology = case.partition("/")
    return FleetConfig(replicas=replicas, router_policy=policy, topology=topology or "sidecar", tenants=tenants)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES))
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[7, 8, 9])
    ap.add_argument("--sessions", type=int, default=16, help="sessions per replica")
    ap.add_argument("--concurrency", type=int, default=4, help="concurrent sessions per replica")
    ap.add_argument("--tenants", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    router, why = find_router()
    if router is None:
        print(f"router_fleet: {why}", file=sys.stderr)
        return 2
    rows = []
    for case in args.cases:
        for seed in args.seeds:
            if case.startswith("single-x"):
                copies = int(case.removeprefix("single-x"))
                spec = DemoSpec(
                    agents=8,
                    sessions=args.sessions,
                    concurrency=args.concurrency,
                    predictability=0.9,
                    max_tokens=64,
                    tool_seconds=(0.3, 1.5),
                    think_seconds=0.25,
                    seed=seed,
                )
                r = run_parallel_singles(copies, spec, args.tenants, router)
                r["case"], r["seed"] = case, seed
                rows.append(r)
                print(
                    f"{case:<26} seed {seed}: hit {r['baseline']['hit_rate']:.3f} → {r['cachescout']['hit_rate']:.3f} "
                    f"({r['hit_gain_pp']:+.1f} pp)  TTFT change {100 * r['ttft_change']:+.1f}%",
                    flush=True,
                )
                continue
            cfg = case_config(case, args.replicas, args.tenants)
            n = cfg.replicas
            spec = DemoSpec(
                agents=8,
                sessions=args.sessions * n // max(1, args.tenants),
                concurrency=max(1, args.concurrency * n // max(1, args.tenants)),
                predictability=0.9,
                max_tokens=64,
                tool_seconds=(0.3, 1.5),
                think_seconds=0.25,
                seed=seed,
            )
            r = run_pair(cfg, spec, router)
            r["case"], r["seed"] = case, seed
            rows.append(r)
            b, s, land = r["baseline"], r["cachescout"], r["landing"]
            print(
                f"{case:<26} seed {seed}: hit {b['hit_rate']:.3f} → {s['hit_rate']:.3f} "
                f"({r['hit_gain_pp']:+.1f} pp)  TTFT {1000 * b['ttft_mean_s']:.0f} → {1000 * s['ttft_mean_s']:.0f} ms "
                f"({100 * r['ttft_change']:+.1f}%)  "
                f"warmups {land['warmups']}: landed {land['landed_share']:.0%}, wrong replica "
                f"{land['wrong_replica_share']:.0%}  errors {b['errors']}/{s['errors']}  "
                f"client requests per replica {r.get('client_requests_per_replica')}",
                flush=True,
            )
    print(
        "\n| case | hit without → with (mean) | gain pp (mean, each seed) | TTFT change (mean) "
        "| warmups on the wrong replica |"
    )
    print("| --- | --- | --- | --- | --- |")
    for case in args.cases:
        rs = [r for r in rows if r["case"] == case]
        gains = [r["hit_gain_pp"] for r in rs]
        print(
            f"| {case} | {statistics.fmean(r['baseline']['hit_rate'] for r in rs):.3f} → "
            f"{statistics.fmean(r['cachescout']['hit_rate'] for r in rs):.3f} | {statistics.fmean(gains):+.1f} "
            f"({', '.join(f'{g:+.1f}' for g in gains)}) | "
            f"{100 * statistics.fmean(r['ttft_change'] for r in rs):+.1f}% | "
            f"{statistics.fmean(r['landing']['wrong_replica_share'] for r in rs):.0%} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
