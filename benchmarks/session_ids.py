"""Sessions for every request, measured behind vllm-router `consistent_hash` (issue 38, item 1).

    .venv/bin/python benchmarks/session_ids.py                      # 2 replicas, seeds 7 8
    .venv/bin/python benchmarks/session_ids.py --replicas 3 --seeds 7 --sessions 8

Four fleets of N simulated engines behind vllm-router (`--policy consistent_hash`), run at the same
time on the same workload (so machine load hits them alike), each with a different client side:

- `no_proxy/no_ids`: the app sends no session id at all (no header, no body `user`): the router has
  nothing to hash but the body, which is what an app that sends no ids gets today;
- `proxy/no_ids`: the same app through CacheScout in front of the router: the proxy adds its inferred
  conversation as `X-Session-ID` (and on its warms for that conversation);
- `proxy/own_ids`: the same app sending its own `X-Session-ID` per session, through CacheScout;
- `no_proxy/own_ids`: the app's own ids, no proxy (the router's own best case, for reference).

Target (issue 38): `proxy/no_ids` within 5% of `proxy/own_ids` on hit rate and mean TTFT, and better
than `no_proxy/no_ids`. Figures: the workload's hit rate (cached / prompt tokens from the engines'
usage), mean TTFT as the client sees it, how client requests spread over the replicas. Workload: the
`cachescout demo` selector group chat (8 agents, tool calls), N x `--sessions` sessions, N x
`--concurrency` at once. Results: docs/results/sessions.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from proxy.harness.router_fleet import MODEL, FleetConfig, _enter_all, find_router, start_fleet, summarise
from proxy.harness.workload import DemoSpec, run_workload

ARMS = ("no_proxy/no_ids", "proxy/no_ids", "proxy/own_ids", "no_proxy/own_ids")


def arm_spec(spec: DemoSpec, arm: str) -> DemoSpec:
    own = arm.endswith("own_ids")
    return replace(spec, session_header=own, user_field=own)


def run_once(cfg: FleetConfig, spec: DemoSpec, router: str) -> dict[str, dict]:
    admin = os.urandom(16).hex()
    with contextlib.ExitStack() as stack:
        fleets = _enter_all(stack, [start_fleet(cfg, arm.startswith("proxy"), admin, router) for arm in ARMS])

        async def all_arms():
            return await asyncio.gather(
                *(run_workload(f.url, arm_spec(spec, arm), model=MODEL) for f, arm in zip(fleets, ARMS, strict=True))
            )

        results = asyncio.run(all_arms())
        out: dict[str, dict] = {}
        for arm, fleet, res in zip(ARMS, fleets, results, strict=True):
            logs = [httpx.get(e + "/debug/requests", timeout=30).json()["requests"] for e in fleet.engines]
            row = summarise([res])
            row["client_requests_per_replica"] = [sum(1 for r in log if not r["warmup"]) for log in logs]
            row["warmups"] = sum(1 for log in logs for r in log if r["warmup"])
            if fleet.proxies:
                auth = {"authorization": f"Bearer {admin}"}
                st = httpx.get(fleet.proxies[0] + "/debug/state", headers=auth, timeout=10).json()
                row["proxy_tagged"] = st["observer"].get("session_tagged", 0)
            out[arm] = row
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[7, 8])
    ap.add_argument("--sessions", type=int, default=8, help="sessions per replica")
    ap.add_argument("--concurrency", type=int, default=4, help="concurrent sessions per replica")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    router, why = find_router()
    if router is None:
        print(f"session_ids: {why}", file=sys.stderr)
        return 2
    n = args.replicas
    cfg = FleetConfig(replicas=n, router_policy="consistent_hash", topology="front")
    rows = []
    for seed in args.seeds:
        spec = DemoSpec(
            agents=8,
            sessions=args.sessions * n,
            concurrency=args.concurrency * n,
            predictability=0.9,
            max_tokens=64,
            tool_seconds=(0.3, 1.5),
            think_seconds=0.25,
            seed=seed,
        )
        res = run_once(replace(cfg, seed=seed), spec, router)
        for arm in ARMS:
            r = res[arm]
            rows.append({"seed": seed, "arm": arm, **r})
            print(
                f"seed {seed} {arm:<18} hit {r['hit_rate']:.3f}  TTFT {1000 * r['ttft_mean_s']:.0f} ms  "
                f"requests {r['requests']} (errors {r['errors']})  per replica {r['client_requests_per_replica']}  "
                f"warmups {r['warmups']}  tagged {r.get('proxy_tagged', '-')}",
                flush=True,
            )
    print(f"\n{n} replicas, consistent_hash, seeds {args.seeds}: means over seeds")
    print("| arm | hit rate | mean TTFT (ms) | client requests per replica |")
    print("| --- | --- | --- | --- |")
    means = {}
    for arm in ARMS:
        rs = [r for r in rows if r["arm"] == arm]
        hit = statistics.fmean(r["hit_rate"] for r in rs)
        ttft = statistics.fmean(r["ttft_mean_s"] for r in rs)
        means[arm] = (hit, ttft)
        spread = "; ".join(str(r["client_requests_per_replica"]) for r in rs)
        print(f"| {arm} | {hit:.3f} | {1000 * ttft:.0f} | {spread} |")
    (h_n, t_n), (h_o, t_o), (h_b, t_b) = means["proxy/no_ids"], means["proxy/own_ids"], means["no_proxy/no_ids"]
    print(
        f"\nproxy/no_ids vs proxy/own_ids: hit {100 * (h_n / h_o - 1):+.1f}%, TTFT {100 * (t_n / t_o - 1):+.1f}%; "
        f"vs no_proxy/no_ids: hit {100 * (h_n - h_b):+.1f} pp, TTFT {100 * (t_n / t_b - 1):+.1f}%"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
