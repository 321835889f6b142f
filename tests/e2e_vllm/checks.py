"""The real-vLLM e2e checks (run by run.sh; not a pytest module on purpose: it needs live servers).

Every verdict compares against vLLM's own numbers — `usage.prompt_tokens_details.cached_tokens`
and the `vllm:*` counters — never against what the proxy believes. Each check returns
(passed, detail); the job fails if any selected check fails. Results and the measured table go to
stdout and to OUT/results.json + OUT/table.md.

  1 pass-through      openai SDK, chat + completions, stream and not: proxy == direct
  2 exact warmup      VllmAdapter.warm (/tokenize ids) restores an evicted anchor
  3 workflow          4-agent workflow direct vs proxy: hit ratio up, mean TTFT down
  4 tool pause        a session paused on tool_calls, evicted while the tool runs, is warm on resume
  5 cache_salt        a warmup for tenant X never makes tenant Y's request hit
  6 overload          agents' contexts + concurrent sessions far over the cache, short tool pauses:
                      the proxy's mean latency <= direct + 3%, hit ratio no lower (check_overload.py)
  7 priority lanes    vLLM with --scheduling-policy priority (its own run: CACHESCOUT_E2E_CHECKS=7):
                      actions at the lowest priority, accepted; tool resumes still warmed; policy vs
                      --no-policy latency in interleaved pairs, reported with 2 SE (check_priority.py)
  8 sessions to vLLM  same run as 7 (CACHESCOUT_E2E_CHECKS=7,8; vLLM also publishes KV events): an app
                      without ids; the proxy's ids one per conversation in vLLM's BlockStored.session_id,
                      lane priority by X-Vllm-Priority, bodies byte-identical (check_sessions.py)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from check_engine import check_cache_salt, check_exact_warmup, check_tool_pause  # noqa: E402
from check_overload import check_overload  # noqa: E402
from check_passthrough import check_passthrough  # noqa: E402
from check_priority import check_priority  # noqa: E402
from check_sessions import check_sessions  # noqa: E402
from flow import run_workflow, table  # noqa: E402
from vclient import labelled, labelled_delta  # noqa: E402
from workload import Workflow, make_agents  # noqa: E402


class Ctx:
    def __init__(self, args: argparse.Namespace) -> None:
        self.vllm = args.vllm.rstrip("/")
        self.proxy = args.proxy.rstrip("/")
        self.model = args.model
        self.out = Path(args.out)
        self.gap = args.gap
        self.client = httpx.Client(timeout=httpx.Timeout(120.0, connect=5.0))
        self.admin_token = os.environ.get("CACHESCOUT_E2E_ADMIN_TOKEN")  # the proxy's, for /debug/state
        self.agents = make_agents()
        self.rows: list[dict] = []
        self.notes: dict = {}

    def log(self, msg: str) -> None:
        print(msg, flush=True)


TTFT_NOISE = 1.10  # check 3: a single direct/proxied pair of runs spreads ~10% in mean TTFT


def check_workflow(ctx: Ctx) -> tuple[bool, str]:
    wf = Workflow(ctx.agents, sessions=ctx.sessions, rounds=2, tag="wf").build()
    salt = "team-x"
    ctx.log(
        f"  workflow: {len(wf.turns)} turns, {len(ctx.agents)} agents, {wf.sessions} sessions, "
        f"gap {ctx.gap}s, cache_salt={salt}"
    )
    direct = run_workflow(
        ctx.client, ctx.vllm, ctx.vllm, wf, ctx.model, name="direct", gap_s=ctx.gap, salt=salt, log=ctx.log
    )
    ctx.log(f"  direct: hit {direct.hit_ratio():.1%}, {direct.seconds:.0f}s")
    a0 = labelled(ctx.client, ctx.proxy, "cachescout_actions_total")
    proxied = run_workflow(
        ctx.client,
        ctx.vllm,
        ctx.proxy,
        wf,
        ctx.model,
        name="proxy",
        gap_s=ctx.gap,
        salt=salt,
        proxy=ctx.proxy,
        log=ctx.log,
    )
    actions = labelled_delta(labelled(ctx.client, ctx.proxy, "cachescout_actions_total"), a0, ("kind", "reason"))
    ctx.log(f"  proxy:  hit {proxied.hit_ratio():.1%}, {proxied.seconds:.0f}s")
    rows = [direct.row(), proxied.row()]
    ctx.rows.extend(rows)
    ctx.notes["proxy_counters"] = {
        k: v
        for k, v in proxied.proxy_delta.items()
        if k.startswith(("cachescout_actions", "cachescout_warmup", "cachescout_prediction")) or k == "agents_gauge"
    }
    ctx.notes["proxy_actions_by_kind_reason"] = actions
    d, p = rows
    errors = d["errors"] + p["errors"]
    # Every warmup token vLLM saw must be one the proxy counted as its own (never as client traffic).
    accounted = abs(p["warmup_tokens_vllm"] - p["warmup_tokens_proxy"]) <= 1024
    # TTFT: one direct run against one proxied run moves by ~10% with nothing changed (2026-12-03 on
    # the final tree: 146 -> 149, 166 -> 153, 195 -> 188 ms; 157 -> 129 on its parent), so a single
    # pair is judged only for harm beyond that spread; the lower TTFT is reported (docs/e2e-vllm.md).
    ok = (
        errors == 0
        and accounted
        and p["hit_ratio"] >= d["hit_ratio"] + 0.10
        and p["ttft_mean_ms"] <= d["ttft_mean_ms"] * TTFT_NOISE
    )
    detail = (
        f"hit ratio direct {d['hit_ratio']:.1%} -> proxy {p['hit_ratio']:.1%} "
        f"(after learning: {d['hit_ratio_late']:.1%} -> {p['hit_ratio_late']:.1%}); "
        f"mean TTFT {d['ttft_mean_ms']:.0f} -> {p['ttft_mean_ms']:.0f} ms; "
        f"warmup tokens vLLM saw {p['warmup_tokens_vllm']:.0f} (proxy counted {p['warmup_tokens_proxy']:.0f}); "
        f"evicted blocks {d['evicted_blocks']:.0f} / {p['evicted_blocks']:.0f}; errors {errors}; "
        f"{'' if accounted else 'WARMUP TOKENS NOT ACCOUNTED FOR; '}"
        f"proxy agents gauge {proxied.proxy_delta.get('agents_gauge')}; "
        f"proxy actions {', '.join(f'{k} {v:.0f}' for k, v in sorted(actions.items())) or 'none'}"
    )
    return ok, detail


CHECKS = {
    "1": ("pass-through (openai SDK)", check_passthrough),
    "2": ("exact-token warmup (adapter)", check_exact_warmup),
    "3": ("learned transitions workflow", check_workflow),
    "4": ("tool-call pause resume", check_tool_pause),
    "5": ("cache_salt isolation", check_cache_salt),
    "6": ("overloaded cache: no harm", check_overload),
    "7": ("priority lanes: slack lane on a priority vLLM", check_priority),
    "8": ("sessions and priority to vLLM by header", check_sessions),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm", required=True)
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--out", default="out/e2e-vllm")
    ap.add_argument("--checks", default="1,2,3,4,5,6")
    ap.add_argument("--gap", type=float, default=0.8, help="seconds between workflow turns")
    ap.add_argument("--sessions", type=int, default=6, help="workflow sessions (2 rounds of 4 agents each)")
    args = ap.parse_args(argv)
    ctx = Ctx(args)
    ctx.sessions = args.sessions
    ctx.out.mkdir(parents=True, exist_ok=True)
    results = []
    for key in [k.strip() for k in args.checks.split(",") if k.strip()]:
        name, fn = CHECKS[key]
        ctx.log(f"== check {key}: {name}")
        t0 = time.perf_counter()
        try:
            ok, detail = fn(ctx)
        except Exception as exc:  # noqa: BLE001 - a crashed check is a failed check, with its reason
            ok, detail = False, f"crashed: {type(exc).__name__}: {exc}"
        secs = time.perf_counter() - t0
        ctx.log(f"   {'PASS' if ok else 'FAIL'} ({secs:.0f}s): {detail}")
        results.append({"check": key, "name": name, "passed": ok, "detail": detail, "seconds": round(secs, 1)})
    summary = "\n".join(
        f"check {r['check']} {'PASS' if r['passed'] else 'FAIL'}: {r['name']} — {r['detail']}" for r in results
    )
    md = "# CacheScout real-vLLM e2e\n\n" + summary.replace("\n", "\n\n") + "\n"
    if ctx.rows:
        md += "\n" + table(ctx.rows) + "\n"
    (ctx.out / "table.md").write_text(md)
    (ctx.out / "results.json").write_text(
        json.dumps({"checks": results, "rows": ctx.rows, "notes": ctx.notes}, indent=2, default=str)
    )
    print("\n" + md, flush=True)
    return 0 if results and all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
