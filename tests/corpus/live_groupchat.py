"""Issue 23's live table: one group chat through `cachescout serve` to the simulated engine, run
three times, identical but for the ids the app sends: one ``X-Session-ID`` per session, none, or
one constant ``user`` for the whole app. Prints, per mode, the agents the proxy learned, the
sessions it saw (``stats.sessions_seen``; truth: the number of sessions), R, top-1 and the actions
it emitted (its own ``/debug/state``). Not a pytest test (it takes a minute or two per mode):

    PYTHONPATH=$PWD .venv/bin/python -m tests.corpus.live_groupchat [--sessions 16] [--json out.json]

Each mode gets a fresh engine and a fresh proxy (nothing learned carries over). The group chat is
the demo's (``proxy.harness.workload``: each agent's instructions as its system message, the task and
the shared transcript after it, tool rounds), driven here so the ids can be chosen.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import secrets
import sys

import httpx

from proxy.harness.child_process import child_process, free_port, sim_proxy_command
from proxy.harness.workload import DemoSpec, _stream, _words, build_agents, script_order

MODES = ("per-session", "none", "constant-user")
MODEL = "sim-llama-3.1-8b"


def _ids(mode: str, sid: int) -> tuple[dict, dict]:
    """(headers, body fields) an app in ``mode`` sends for session ``sid``."""
    if mode == "per-session":
        return {"x-session-id": f"chat-{sid}"}, {}
    if mode == "constant-user":
        return {}, {"user": "the-app"}
    return {}, {}


async def _session(client: httpx.AsyncClient, url: str, spec: DemoSpec, sid: int, mode: str, agents, script) -> int:
    rng = random.Random(spec.seed * 1000 + sid)
    headers, extra = _ids(mode, sid)
    task = {"role": "user", "content": f"Task {sid}: " + _words(rng, rng.randint(*spec.task_words))}
    transcript: list[dict] = []
    cur: int | None = None
    errors = 0
    for _step in range(rng.randint(*spec.steps)):
        cur = (
            rng.randrange(spec.agents)
            if cur is None
            else (script[cur] if rng.random() < spec.predictability else rng.randrange(spec.agents))
        )
        agent = agents[cur]
        own: list[dict] = []
        for round_ in range(spec.max_tool_rounds + 1):
            body: dict = {
                "model": MODEL,
                "messages": [{"role": "system", "content": agent.system}, task, *transcript, *own],
                "max_tokens": spec.max_tokens,
                "stream": True,
                "stream_options": {"include_usage": True},
                "temperature": 0,
                **extra,
            }
            if agent.tools:
                body["tools"] = list(agent.tools)
                body["tool_choice"] = "auto" if round_ < spec.max_tool_rounds else "none"
            try:
                summary, _ttft, _lat = await _stream(client, url, body, headers)
            except (httpx.HTTPError, RuntimeError, ValueError):
                return errors + 1
            if summary["finish_reason"] != "tool_calls" or not summary["tool_calls"]:
                transcript.append({"role": "user", "name": agent.name, "content": summary["content"] or "(done)"})
                break
            own.append(
                {"role": "assistant", "content": summary["content"] or None, "tool_calls": summary["tool_calls"]}
            )
            await asyncio.sleep(rng.uniform(*spec.tool_seconds))
            for call in summary["tool_calls"]:
                own.append({"role": "tool", "tool_call_id": call["id"], "content": "result: " + _words(rng, 60)})
        await asyncio.sleep(spec.think_seconds)
    return errors


async def _drive(url: str, spec: DemoSpec, mode: str) -> int:
    agents, script = build_agents(spec), script_order(spec)
    sem = asyncio.Semaphore(spec.concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:

        async def one(sid: int) -> int:
            async with sem:
                return await _session(client, url + "/v1/chat/completions", spec, sid, mode, agents, script)

        return sum(await asyncio.gather(*(one(s) for s in range(spec.sessions))))


def run_mode(mode: str, spec: DemoSpec, cache_blocks: int = 480) -> dict:
    py = sys.executable
    admin = secrets.token_hex(16)
    ep, pp = free_port(), free_port()
    eurl, purl = f"http://127.0.0.1:{ep}", f"http://127.0.0.1:{pp}"
    engine = [py, "-m", "proxy.cli", "sim-engine", "--port", str(ep), "--model", MODEL]
    engine += ["--capacity-blocks", str(cache_blocks), "--prefill-tokens-per-s", "3000", "--output-tokens", "8"]
    engine += ["--seed", str(spec.seed), "--tool-call-share", "0.5", "--log-level", "warning"]
    env = {"CACHESCOUT_ADMIN_TOKEN": admin, "CACHESCOUT_POLICY_OVERRIDES": json.dumps({"top_k": 1, "sweep_top_n": 0})}
    with contextlib.ExitStack() as stack:
        stack.enter_context(child_process(engine, eurl + "/health"))
        stack.enter_context(child_process(sim_proxy_command(py, pp, eurl), purl + "/livez", env=env))
        errors = asyncio.run(_drive(purl, spec, mode))
        state = httpx.get(purl + "/debug/state", headers={"authorization": f"Bearer {admin}"}, timeout=10).json()
    st = state["stats"]
    return {
        "mode": mode,
        "agents": st["agents"],
        "sessions_seen": st.get("sessions_seen", st["sessions"]),  # (older trees: live sessions)
        "R": round(st["predictability"], 2),
        "top1": round(st["top1_accuracy"], 2),
        "transitions": st["transitions"],
        "actions": sum(st["actions_emitted"].values()),
        "errors": errors,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--agents", type=int, default=6)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()
    spec = DemoSpec(
        agents=args.agents,
        sessions=args.sessions,
        concurrency=args.concurrency,
        predictability=0.9,
        seed=args.seed,
        max_tokens=64,
        tool_seconds=(0.05, 0.3),
        think_seconds=0.25,
    )
    rows = [run_mode(m, spec) for m in args.modes.split(",")]
    print(f"| ids the app sends | agents | sessions seen (truth {spec.sessions}) | R | top-1 | transitions | actions |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['mode']} | {r['agents']} | {r['sessions_seen']} | {r['R']:.2f} | {r['top1']:.2f} | "
            f"{r['transitions']} | {r['actions']} |" + (f" errors {r['errors']}" if r["errors"] else "")
        )
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
