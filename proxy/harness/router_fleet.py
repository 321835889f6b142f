"""CacheScout behind a real router: N simulated engines behind `vllm-router`, with and without CacheScout.

Why: a warmup is worth its cost only if the next request that needs the warmed prefix reaches the
replica that was warmed. This module starts, on loopback, the two deployment shapes documented in
docs/deploy.md ("More than one replica") and measures what the client sees:

- `sidecar`: router → one CacheScout per engine → engine (the Kubernetes pod shape). Each sidecar
  learns from, and warms, only the traffic the router sends to its engine.
- `front`: CacheScout → router → engines. One proxy sees the whole workflow; its warmups go through
  the router like any request, so they land where the router's policy puts that prefix (with
  `kv_aware`, fed by the engines' KV events, a warmed prefix then attracts the request).

Every measurement is a pair run at the same time on two identical fleets (so machine load hits
both alike): the baseline fleet (router → engines) and the treated one (with CacheScout). Figures:
the workload's own hit ratio (`cached_tokens / prompt_tokens` from the engines' usage), TTFT and
per-turn latency as the client sees them, and where the warmups landed, from each engine's
`/debug/requests` log (`--request-log`): a warmup *landed* if a client request on the same replica
later used its last block, went to the *wrong replica* if only client requests on other replicas
did, and is *unused* otherwise (a prediction miss, not a routing problem). Tenant isolation: every
warmup's first block must be one that the same tenant's client traffic has (salted chains differ).

The router binary is the `vllm-router` console script of the PyPI package (pinned in the `test`
extra); `find_router()` says why when it is missing. Processes are children on free ports, stopped
by PID (proxy/harness/child_process.py); the router and the front proxy start on a port picked again
if they could not bind it (`child_on_free_port`: the router connects out to its workers before it
binds, and lost its port once in CI).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from proxy.harness.child_process import child_on_free_port, child_process, free_port, sim_proxy_command
from proxy.harness.workload import DemoSpec, WorkloadResult, run_workload

MODEL = "sim-llama-3.1-8b"
ROUTER_POLICIES = ("round_robin", "consistent_hash", "sticky_least_loaded", "cache_aware", "kv_aware")
# The proxy's policy settings in these runs: the demo's (top-1 successor only, no survival sweeps).
FLEET_POLICY: dict[str, float] = {"top_k": 1, "sweep_top_n": 0}
START_TIMEOUT_S = 120.0  # a fleet's children start at once; on a loaded 2-core machine that takes a while


def find_router() -> tuple[str | None, str]:
    """(path of the `vllm-router` executable, why not when None)."""
    here = Path(sys.executable).parent / "vllm-router"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here), ""
    found = shutil.which("vllm-router")
    if found:
        return found, ""
    return None, (
        "vllm-router is not installed (pip install 'cachescout[test]' pins vllm-router==0.1.17; its "
        "wheel is manylinux_2_28 x86_64 only)"
    )


@dataclass(frozen=True, slots=True)
class FleetConfig:
    replicas: int = 2
    router_policy: str | None = "consistent_hash"  # None: no router (one engine, the single-replica case)
    topology: str = "sidecar"  # "sidecar" | "front"
    cache_blocks: int = 480
    prefill_tps: float = 3000.0
    speed: float = 1.0
    output_tokens: int = 8
    tenants: int = 1
    seed: int = 7
    policy: dict[str, float] = field(default_factory=lambda: dict(FLEET_POLICY))


@dataclass(slots=True)
class Fleet:
    url: str  # where the clients send
    engines: list[str]
    proxies: list[str]  # CacheScout URLs (sidecars or the front proxy)


def _engine_cmd(cfg: FleetConfig, port: int, zmq_port: int | None) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "proxy.cli",
        "sim-engine",
        "--port",
        str(port),
        "--model",
        MODEL,
        "--capacity-blocks",
        str(cfg.cache_blocks),
        "--prefill-tokens-per-s",
        str(cfg.prefill_tps),
        "--speed",
        str(cfg.speed),
        "--output-tokens",
        str(cfg.output_tokens),
        "--seed",
        str(cfg.seed),
        "--tool-call-share",
        "0.5",
        "--request-log",
        "20000",
        "--log-level",
        "warning",
    ]
    if zmq_port is not None:
        cmd += ["--kv-events-endpoint", f"tcp://127.0.0.1:{zmq_port}"]
    return cmd


def _proxy_cmd(port: int, upstream: str) -> list[str]:
    return sim_proxy_command(sys.executable, port, upstream)


def router_cmd(
    router: str, port: int, workers: Sequence[str], policy: str, kv_sources: Sequence[tuple[str, str]] = ()
) -> list[str]:
    """vllm-router 0.1.17's flags (checked against its `--help`), as docs/deploy.md documents them."""
    cmd = [
        router,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--worker-urls",
        *workers,
        "--policy",
        policy,
        "--prometheus-port",
        str(free_port()),
        "--log-level",
        "warning",
    ]
    for worker, endpoint in kv_sources:
        cmd += ["--kv-event-source", f"{worker}={endpoint}"]
    if kv_sources:
        cmd += ["--kv-event-model", MODEL, "--kv-event-block-size", "16"]
    return cmd


def _enter_all(stack: contextlib.ExitStack, ctxs: Sequence[contextlib.AbstractContextManager]) -> list[Any]:
    """Start several children at once (each waits for its own readiness) and register their stops;
    starting a fleet one process at a time costs seconds per process on a loaded machine."""
    with ThreadPoolExecutor(max_workers=max(1, len(ctxs))) as pool:
        futures = [pool.submit(c.__enter__) for c in ctxs]
        errors, values = [], []
        for c, f in zip(ctxs, futures, strict=False):
            try:
                values.append(f.result())
                stack.push(c.__exit__)
            except Exception as exc:  # noqa: BLE001 - re-raised below after the others are registered
                errors.append(exc)
    if errors:
        raise errors[0]
    return values


@contextlib.contextmanager
def start_fleet(cfg: FleetConfig, with_scout: bool, admin: str, router: str | None) -> Iterator[Fleet]:
    """Engines (+ sidecars) (+ router) (+ front proxy); everything stopped on exit."""
    env = {
        "CACHESCOUT_ADMIN_TOKEN": admin,
        "CACHESCOUT_POLICY_OVERRIDES": json.dumps(cfg.policy),
        "CACHESCOUT_POLICY_ENABLED": "true",
    }
    kv = cfg.router_policy == "kv_aware"
    with contextlib.ExitStack() as stack:
        engines, zmq, starts = [], [], []
        for _ in range(cfg.replicas):
            port, zport = free_port(), (free_port() if kv else None)
            url = f"http://127.0.0.1:{port}"
            starts.append(child_process(_engine_cmd(cfg, port, zport), url + "/health", timeout=START_TIMEOUT_S))
            engines.append(url)
            zmq.append(f"tcp://127.0.0.1:{zport}" if zport else "")
        workers, proxies = list(engines), []
        if with_scout and cfg.topology == "sidecar":
            workers = []
            for url in engines:  # a sidecar starts without its engine (/livez is its own)
                port = free_port()
                purl = f"http://127.0.0.1:{port}"
                starts.append(child_process(_proxy_cmd(port, url), purl + "/livez", env=env, timeout=START_TIMEOUT_S))
                workers.append(purl)
                proxies.append(purl)
        _enter_all(stack, starts)
        if cfg.router_policy is None:
            if cfg.replicas != 1:
                raise ValueError("more than one replica needs a router policy")
            front = workers[0]
        else:
            if router is None:
                raise RuntimeError(find_router()[1])
            sources = list(zip(workers, zmq, strict=False)) if kv else []
            policy = cfg.router_policy
            _, port = stack.enter_context(
                child_on_free_port(
                    lambda p: (router_cmd(router, p, workers, policy, sources), f"http://127.0.0.1:{p}/readiness"),
                    timeout=START_TIMEOUT_S,
                )
            )
            front = f"http://127.0.0.1:{port}"
        if with_scout and cfg.topology == "front":
            upstream = front
            _, port = stack.enter_context(
                child_on_free_port(
                    lambda p: (_proxy_cmd(p, upstream), f"http://127.0.0.1:{p}/livez"), env=env, timeout=START_TIMEOUT_S
                )
            )
            front = f"http://127.0.0.1:{port}"
            proxies.append(front)
        yield Fleet(front, engines, proxies)


# ---------------------------------------------------------------------------------------- measuring
def landing(logs: Sequence[Sequence[dict]], by_session: bool = False) -> dict[str, Any]:
    """Where each warmup landed, from the engines' request logs (one list per replica).

    The request a warmup was for is the next client request that contains the warmup's last block:
    among all later requests (`by_session=False`: CacheScout in front, which warms for any session),
    or among the sessions the warmed replica was serving when the warmup was sent (`by_session=True`:
    a sidecar predicts only for sessions it has seen; their next request is the one it warmed for).
    landed = that request went to the warmed replica; wrong_replica = it went elsewhere (the router
    defeated the warmup); unused = no such request (a prediction miss, not a routing problem).
    `used_here_later` counts warmups whose block any later client request on the same replica used."""
    clients = sorted(
        (r["t"], k, r.get("session"), r["hashes"]) for k, log in enumerate(logs) for r in log if not r["warmup"]
    )
    uses: dict[int, list[tuple[float, int, str | None]]] = {}
    for t, k, sess, hashes in clients:
        for h in hashes:
            uses.setdefault(h, []).append((t, k, sess))
    out: dict[str, float] = {"warmups": 0, "landed": 0, "wrong_replica": 0, "unused": 0, "used_here_later": 0}
    for k, log in enumerate(logs):
        for r in log:
            if not r["warmup"] or not r["hashes"]:
                continue
            out["warmups"] += 1
            later = sorted(u for u in uses.get(r["hashes"][-1], ()) if u[0] > r["t"])
            out["used_here_later"] += any(rep == k for _, rep, _ in later)
            if by_session:
                held = _sessions_held(clients, k, r["t"])
                later = [u for u in later if u[2] in held]
            if not later:
                out["unused"] += 1
                continue
            out["landed" if later[0][1] == k else "wrong_replica"] += 1
    n = out["warmups"]
    out["wrong_replica_share"] = out["wrong_replica"] / n if n else 0.0
    out["landed_share"] = out["landed"] / n if n else 0.0
    return out


def _sessions_held(clients: Sequence[tuple], replica: int, t: float) -> set[str]:
    """Sessions whose latest client request before `t` went to `replica`."""
    last: dict[str, int] = {}
    for tc, k, sess, _ in clients:
        if tc >= t:
            break
        if sess is not None:
            last[sess] = k
    return {s for s, k in last.items() if k == replica}


def isolation(logs: Sequence[Sequence[dict]]) -> dict[str, int]:
    """Warmups whose first block no client request has. Every tenant's requests carry its own
    cache_salt, which the engine hashes into the first block: a warmup sent without the traffic's
    salt, or with another tenant's salt on this tenant's prompt, has a first block no client sent."""
    client_first = {r["hashes"][0] for log in logs for r in log if not r["warmup"] and r["hashes"]}
    foreign = sum(1 for log in logs for r in log if r["warmup"] and r["hashes"] and r["hashes"][0] not in client_first)
    return {"warmups_without_matching_traffic": foreign, "client_first_blocks": len(client_first)}


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    vs = sorted(values)
    return vs[min(len(vs) - 1, max(0, round(q * (len(vs) - 1))))]


def summarise(results: Sequence[WorkloadResult]) -> dict[str, Any]:
    recs = [r for res in results for r in res.records]
    turns = [t for res in results for t in res.turn_latencies]
    prompt = sum(r.prompt_tokens for r in recs)
    cached = sum(r.cached_tokens for r in recs)
    ttfts = [r.ttft_s for r in recs if r.ttft_s is not None]
    return {
        "requests": len(recs),
        "errors": sum(res.errors for res in results),
        "hit_rate": cached / prompt if prompt else 0.0,
        "ttft_mean_s": statistics.fmean(ttfts) if ttfts else float("nan"),
        "ttft_p50_s": _pct(ttfts, 0.5),
        "turn_mean_s": statistics.fmean(turns) if turns else float("nan"),
    }


def _specs(spec: DemoSpec, cfg: FleetConfig) -> list[DemoSpec]:
    """One workload per tenant: the same agents and tasks (so only the salt tells them apart), each
    tenant with its own cache_salt and session labels. Every request carries `X-Session-ID`:
    vllm-router 0.1.17's session policies need the header, because its scan of a chat body for
    `"user"` finds the first message's role instead of the field (body-only sessions all landed on
    one replica)."""
    spec = replace(spec, session_header=True)
    if cfg.tenants <= 1:
        return [spec]
    return [replace(spec, cache_salt=f"tenant-{i}-salt", session_label=f"t{i}-session") for i in range(cfg.tenants)]


def _proxy_stats(url: str, auth: dict) -> dict[str, Any]:
    eng = httpx.get(url + "/debug/engine", headers=auth, timeout=10).json()
    st = httpx.get(url + "/debug/state", headers=auth, timeout=10).json()["stats"]
    return {
        "warm_ok": eng["executor"]["ok"],
        "warm_prompt_tokens": eng["executor"]["warm_prompt_tokens"],
        "predictability": st["predictability"],
        "top1_accuracy": st["top1_accuracy"],
        "predictions": st.get("predictions", 0),
    }


def run_pair(cfg: FleetConfig, spec: DemoSpec, router: str | None = None, baseline: bool = True) -> dict[str, Any]:
    """Baseline fleet and CacheScout fleet side by side, same workload, same time (`baseline=False`:
    the CacheScout fleet alone, for the landing and isolation figures)."""
    admin = os.urandom(16).hex()
    auth = {"authorization": f"Bearer {admin}"}
    specs = _specs(spec, cfg)
    with contextlib.ExitStack() as fleets:
        wanted = [start_fleet(cfg, True, admin, router)] + (
            [start_fleet(cfg, False, admin, router)] if baseline else []
        )
        scout, *rest = _enter_all(fleets, wanted)

        async def both() -> tuple[list[WorkloadResult], list[WorkloadResult]]:
            runs = [run_workload(f.url, s, model=MODEL) for f in (scout, *rest) for s in specs]
            done = await asyncio.gather(*runs)
            return list(done[: len(specs)]), list(done[len(specs) :])

        scout_res, base_res = asyncio.run(both())
        logs = [httpx.get(e + "/debug/requests", timeout=30).json()["requests"] for e in scout.engines]
        proxies = [_proxy_stats(p, auth) for p in scout.proxies]
    b, s = (summarise(base_res) if baseline else None), summarise(scout_res)
    out = {
        "config": {
            "replicas": cfg.replicas,
            "router_policy": cfg.router_policy,
            "topology": cfg.topology,
            "cache_blocks": cfg.cache_blocks,
            "tenants": cfg.tenants,
        },
        "baseline": b,
        "cachescout": s,
        "hit_gain_pp": 100.0 * (s["hit_rate"] - b["hit_rate"]) if b else None,
        "ttft_change": s["ttft_mean_s"] / b["ttft_mean_s"] - 1.0 if b and b["ttft_mean_s"] else None,
        "turn_change": s["turn_mean_s"] / b["turn_mean_s"] - 1.0 if b and b["turn_mean_s"] else None,
        "landing": landing(logs, by_session=cfg.topology == "sidecar"),
        "client_requests_per_replica": [sum(1 for r in log if not r["warmup"]) for log in logs],
        "isolation": isolation(logs),
        "proxies": proxies,
        "warmups": sum(p["warm_ok"] for p in proxies),
    }
    return out
