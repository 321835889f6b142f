"""CacheScout behind a real vllm-router (PyPI, pinned), on loopback sockets, with simulated engines.

Each case runs the same multi-agent workload (two tenants, each with its own cache_salt) at the same
time through a baseline fleet (router → engines) and a CacheScout fleet, and checks what the
topology promises (docs/deploy.md, "More than one replica"):
- sidecar per replica + consistent_hash: sessions spread over the replicas and warmups land where the
  session's next request goes (at most WRONG_REPLICA_SESSION of them on another replica);
- sidecar per replica + round_robin: the router sends the next request elsewhere about (N-1)/N of
  the time; the measurement must see it (this is the case the docs advise against);
- CacheScout in front + kv_aware (KV events from the engines): warmups go through the router and
  later requests for the warmed prefix use the replica the warmup filled (USED_HERE_KV_FRONT);
- every case: no client errors, and every warmup carries its own tenant's salt (its first block is
  one that tenant's traffic has).
The workload is small (seconds per case), too small for the hit ratio and TTFT it prints to be more
than indicative; the figures for the docs (gain with vs without) come from benchmarks/router_fleet.py.
"""

from __future__ import annotations

import pytest

from proxy.harness.router_fleet import FleetConfig, find_router, run_pair
from proxy.harness.workload import DemoSpec

pytestmark = pytest.mark.sockets

WRONG_REPLICA_SESSION = 0.10  # documented share for session affinity (measured: 0%)
# kv_aware with CacheScout in front: a share of the warmups is used later on the replica they filled
# (85% when this test was written; 58% on 2026-12-04: 25 of 43 warmups over five runs of 6-13
# warmups each, the planner's warms now mostly tool resumes of session contexts; on benchmark-size
# runs 73-87% are followed by the very next request for that prefix). Two seeds are pooled and the
# bound sits well below the measured share: with 6-13 warmups a run, a bound of half failed 2 runs
# in 5. The "next request" share is not asserted here: with 2 replicas kv_aware may hold an agent's
# anchor on both, and on this small run the next user of a prefix went elsewhere up to 63%.
USED_HERE_KV_FRONT = 0.3
REPLICAS = 2

ROUTER, WHY = find_router()


def spec(seed: int = 11) -> DemoSpec:
    # per tenant: 10 sessions over 2 replicas, 3 at a time; short tools and gaps to keep it to seconds
    return DemoSpec(
        agents=4,
        tool_agents=2,
        sessions=10,
        concurrency=3,
        steps=(5, 7),
        predictability=0.95,
        anchor_words=(300, 400),
        task_words=(20, 40),
        tool_result_words=(20, 40),
        tool_seconds=(0.1, 0.3),
        think_seconds=0.05,
        max_tokens=16,
        seed=seed,
    )


def run(policy: str, topology: str, need_warmups: bool = True, baseline: bool = True, seed: int = 11) -> dict:
    if ROUTER is None:
        pytest.skip(WHY)
    cfg = FleetConfig(
        replicas=REPLICAS,
        router_policy=policy,
        topology=topology,
        cache_blocks=320,
        prefill_tps=6000.0,
        speed=1.0,
        tenants=2,
    )
    res = run_pair(cfg, spec(seed), ROUTER, baseline=baseline)
    b, s, land = (
        res["baseline"] or {"hit_rate": float("nan"), "ttft_mean_s": float("nan"), "errors": 0},
        res["cachescout"],
        res["landing"],
    )
    print(
        f"\n{policy}/{topology}: hit {b['hit_rate']:.3f} -> {s['hit_rate']:.3f}, TTFT {1000 * b['ttft_mean_s']:.0f} -> "
        f"{1000 * s['ttft_mean_s']:.0f} ms, warmups {land}, isolation {res['isolation']}"
    )
    assert b["errors"] == 0 and s["errors"] == 0
    assert s["requests"] > 0 and (res["baseline"] is None or res["baseline"]["requests"] == s["requests"])
    assert land["warmups"] > 0 or not need_warmups, "the proxy never acted: nothing was measured"
    assert res["isolation"]["warmups_without_matching_traffic"] == 0
    return res


RESULTS: dict[str, dict] = {}


def mean_r(res: dict) -> float:
    return sum(p["predictability"] for p in res["proxies"]) / len(res["proxies"])


def test_sidecars_behind_consistent_hash_warm_where_the_session_goes():
    res = RESULTS["consistent_hash"] = run("consistent_hash", "sidecar")
    assert min(res["client_requests_per_replica"]) > 0, res["client_requests_per_replica"]  # sessions spread
    assert res["landing"]["wrong_replica_share"] <= WRONG_REPLICA_SESSION, res["landing"]


def test_round_robin_sends_the_next_request_elsewhere():
    """Each sidecar sees every other turn of a session: what it learns is noisier (R lower than
    behind consistent_hash, so it warms less), and the warmups it does send are often for a request
    the router gives to the other replica."""
    res = run("round_robin", "sidecar", need_warmups=False, baseline=False)
    land = res["landing"]
    if land["warmups"] >= 10:  # a share of a handful of warmups says nothing
        assert land["wrong_replica_share"] >= 0.2, land
    if "consistent_hash" in RESULTS:
        assert mean_r(res) < mean_r(RESULTS["consistent_hash"]), (res["proxies"], RESULTS["consistent_hash"]["proxies"])


def test_cachescout_in_front_of_kv_aware_router_sends_warmups_through_it():
    """The proxy's warmups go through the router (the engines see them, with the traffic's salt) and
    kv_aware, fed by the engines' KV events, puts them where later requests for the same prefix go.
    (On real-size runs 73-87% are followed by the request that needs them; this small run checks
    the wiring and that warmups are used on the replica they filled, not the hit ratio, which
    kv_aware alone already gets: docs/deploy.md.)"""
    lands = [run("kv_aware", "front", seed=seed)["landing"] for seed in (11, 12)]
    used, warmups = sum(x["used_here_later"] for x in lands), sum(x["warmups"] for x in lands)
    assert used >= 2 and used >= USED_HERE_KV_FRONT * warmups, lands
