"""Checks 2, 4 and 5: exact-token warmup, tool-call pause, cache_salt isolation — on the real engine.

Why each has a control: "the next request hit" proves nothing unless the same sequence without
the proxy's action does NOT hit. So check 2 evicts the anchor and shows a miss first; check 4
runs the pause once direct (must miss) and once through the proxy; check 5 shows the salted warmup
really made tenant X hit before claiming that tenant Y did not. Expected hit sizes come from
vLLM's own /tokenize (the common token prefix, in whole 32-token blocks) — vLLM only reports
whole blocks.
"""

from __future__ import annotations

import asyncio
import time

import httpx
from vclient import (
    common_prefix,
    debug_state,
    delta,
    full_blocks,
    labelled,
    labelled_delta,
    metrics,
    reset_prefix_cache,
    stream_chat,
    tokenize,
)
from workload import make_agent, text

SESSION_HEADER = "x-session-id"
TOOL_REGEX = r'<tool_call>\n\{"name": "coder_run", "arguments": \{"query": "make test"\}\}\n</tool_call>'


def _body(model: str, messages: list[dict], tools, *, max_tokens: int = 4, salt: str | None = None, **extra) -> dict:
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0, **extra}
    if tools:
        body["tools"] = list(tools)
    if salt:
        body["cache_salt"] = salt
    return body


def _turn(agent, tag: str, history: int = 2) -> list[dict]:
    msgs = [*agent.anchor_messages(), {"role": "user", "content": f"Task {tag}: " + text(f"t:{tag}", 60)}]
    msgs += [{"role": "user", "content": text(f"h:{tag}:{i}", 45)} for i in range(history)]
    return msgs


def _evict(ctx, base: str, tag: str, n: int = 3, salt: str | None = None, names: str = "bystander") -> int:
    """Unrelated traffic (other agents, other sessions) big enough to push everything out of the cache."""
    total = 0
    for i in range(n):
        agent = make_agent(f"{names}{i}", words=150)
        r = stream_chat(
            ctx.client,
            base,
            _body(ctx.model, _turn(agent, f"{tag}-ev{i}", history=5), agent.tools, salt=salt),
            headers={SESSION_HEADER: f"{tag}-ev{i}"},
        )
        if r.status != 200:
            raise RuntimeError(f"evictor request answered {r.status}: {r.error}")
        total += r.prompt_tokens
    return total


def _anchor_expectation(ctx, agent, messages: list[dict]) -> int:
    """Whole blocks of the agent's anchor (system + tools, as vLLM tokenizes it) that `messages` shares."""
    anchor = tokenize(
        ctx.client, ctx.vllm, ctx.model, agent.anchor_messages(), list(agent.tools), add_generation_prompt=False
    )
    full = tokenize(ctx.client, ctx.vllm, ctx.model, messages, list(agent.tools))
    return full_blocks(common_prefix(anchor, full))


async def _adapter_warm(vllm: str, model: str, body: dict, tenant: str):
    """Warm `body`'s anchor exactly as the live proxy would: its view's anchor payload, VllmAdapter.warm."""
    from proxy.core.action_payload import ActionPayload
    from proxy.core.actions import Action
    from proxy.core.fingerprint import view_from_openai
    from proxy.engines.vllm import VllmAdapter

    view = view_from_openai("/v1/chat/completions", body, {})
    if view is None or not view.anchor_blocks:
        raise RuntimeError("proxy.core.fingerprint built no anchor for the request")
    now = time.monotonic()
    action = Action(
        kind="warm",
        reason="transition",
        tenant=tenant,
        anchor_id="e2e",
        block_hashes=view.block_hashes[: view.anchor_blocks],
        tokens=sum(view.block_tokens[: view.anchor_blocks]),
        payload=ActionPayload(view.anchor_payload),
        priority=0,
        created=now,
        deadline=now + 30,
    )
    async with httpx.AsyncClient() as client:
        adapter = VllmAdapter(client, vllm, default_model=model)
        await adapter.probe()
        result = await adapter.warm(action)
        return result, adapter.info()


def check_exact_warmup(ctx) -> tuple[bool, str]:
    agent = ctx.agents[0]
    first = _turn(agent, "c2-a1")
    nxt = _turn(agent, "c2-a2")
    expect = _anchor_expectation(ctx, agent, nxt)
    cached = {}
    for mode in ("control", "warm"):
        reset_prefix_cache(ctx.client, ctx.vllm)
        r = stream_chat(ctx.client, ctx.vllm, _body(ctx.model, first, agent.tools))
        assert r.status == 200, r.error
        _evict(ctx, ctx.vllm, f"c2-{mode}")
        if mode == "warm":
            result, info = asyncio.run(_adapter_warm(ctx.vllm, ctx.model, _body(ctx.model, first, agent.tools), ""))
            ctx.log(f"   adapter.warm -> {result}; capabilities {info.get('capabilities')}")
            if not result.ok:
                return False, f"VllmAdapter.warm failed: {result.error} (adapter {info})"
        r = stream_chat(ctx.client, ctx.vllm, _body(ctx.model, nxt, agent.tools))
        assert r.status == 200, r.error
        cached[mode] = r.cached_tokens
        ctx.log(f"   {mode}: next request cached_tokens={r.cached_tokens} of {r.prompt_tokens}")
    ok = expect >= 320 and cached["control"] == 0 and cached["warm"] >= expect
    return ok, (
        f"anchor = {expect} tokens in full blocks; next request cached_tokens without warmup "
        f"{cached['control']}, after VllmAdapter.warm {cached['warm']}"
    )


def _tool_calls_msgs(r) -> tuple[dict, list[dict]]:
    """The assistant turn a client appends for a tool_calls reply, and its tool results."""
    calls = [
        {"id": tc.get("id", f"call{i}"), "type": "function", "function": tc["function"]}
        for i, tc in enumerate(r.tool_calls)
    ]
    return (
        {"role": "assistant", "content": None, "tool_calls": calls},
        [{"role": "tool", "tool_call_id": c["id"], "content": "exit 0: 212 passed"} for c in calls],
    )


def _skips(ctx, base: str) -> dict:
    """The proxy planner's skip counters (/debug/state), or {} (direct runs, no admin token)."""
    if base != ctx.proxy:
        return {}
    return debug_state(ctx.client, ctx.proxy, ctx.admin_token).get("stats", {}).get("actions_skipped", {})


def _tool_pause(ctx, base: str, tag: str, tool_s: float, rounds: int) -> dict:
    """One coder session doing `rounds` tool calls. Each tool runs `tool_s` seconds: first 3 other
    agents' requests (~3,600 tokens, more than the 72-block cache) go through, then the tool is
    still running (quiet). The session then resumes with the tool result; every resume but the
    last ends in tool_calls again (forced), so the proxy sees `rounds - 1` tool gaps of this agent
    before the measured last resume. Timing-sensitive parts first; /tokenize after."""
    agent = next(a for a in ctx.agents if a.name == "coder")
    msgs = _turn(agent, f"{tag}-tool", history=4)
    sid = {SESSION_HEADER: f"{tag}-tool"}
    reset_prefix_cache(ctx.client, ctx.vllm)
    forced = {"max_tokens": 64, "structured_outputs": {"regex": TOOL_REGEX}}
    replies, pauses, contexts = [], [], []
    for k in range(rounds + 1):
        contexts.append(msgs)
        r = stream_chat(
            ctx.client, base, _body(ctx.model, msgs, agent.tools, **(forced if k < rounds else {})), headers=sid
        )
        if r.status != 200:
            raise RuntimeError(f"request {k} answered {r.status}: {r.error}")
        replies.append(r)
        if k == rounds:
            break
        if r.finish_reason != "tool_calls" or not r.tool_calls:
            raise RuntimeError(f"could not get a tool_calls response from vLLM: finish {r.finish_reason}")
        t_pause, paused_at = time.perf_counter(), time.monotonic()
        k0 = _skips(ctx, base)
        v0 = metrics(ctx.client, ctx.vllm)
        evicted = _evict(ctx, base, f"{tag}-r{k}", names=f"bystander{k}-")  # the tool runs; others go on
        traffic_s = time.perf_counter() - t_pause
        v1 = metrics(ctx.client, ctx.vllm)
        time.sleep(max(0.0, tool_s - (time.perf_counter() - t_pause)))  # ... and the tool still runs
        v2 = metrics(ctx.client, ctx.vllm)
        k1 = _skips(ctx, base)  # why the planner did not act during this pause (diagnostics)
        skipped = {k: v - k0.get(k, 0) for k, v in k1.items() if v - k0.get(k, 0)}
        prompt = "vllm:prompt_tokens_total"
        # vLLM's own count of prompt tokens beyond the client's = the proxy's warmups, and when
        pauses.append(
            {
                "tool_ms": round(1000 * (time.perf_counter() - t_pause)),
                "evictor_tokens": evicted,
                "traffic_ms": round(1000 * traffic_s),
                "paused_at_monotonic": round(paused_at, 3),
                "extra_tokens_during_traffic": round(delta(v1, v0, prompt) - evicted),
                "extra_tokens_after_traffic": round(delta(v2, v1, prompt)),
                **({"planner_skips": skipped} if skipped else {}),
            }
        )
        assistant, results = _tool_calls_msgs(r)
        msgs = [*msgs, assistant, *results]
    resumes = []
    tok = [tokenize(ctx.client, ctx.vllm, ctx.model, m, list(agent.tools)) for m in contexts]
    for k, p in enumerate(pauses):  # pause k: paused context k, resumed by request k + 1
        nxt = replies[k + 1]
        expect = full_blocks(common_prefix(tok[k], tok[k + 1]))
        resumes.append(
            {
                **p,
                "expect": expect,
                "resume_cached": nxt.cached_tokens,
                "resume_prompt": nxt.prompt_tokens,
                "resume_ttft_ms": round(1000 * (nxt.ttft or 0)),
            }
        )
    return {"rounds": resumes, **resumes[-1]}


def check_tool_pause(ctx, tool_s: float = 5.0, rounds: int = 3) -> tuple[bool, str]:
    """Judged on the last resume only: by then the proxy has seen `rounds - 1` tool gaps of this
    agent and can warm at the predicted time. The earlier resumes are reported, not judged."""
    direct = _tool_pause(ctx, ctx.vllm, "c4d", tool_s, rounds)
    ctx.log(f"   direct: {direct}")
    a0 = labelled(ctx.client, ctx.proxy, "cachescout_actions_total")
    proxied = _tool_pause(ctx, ctx.proxy, "c4p", tool_s, rounds)
    proxied["proxy_actions"] = labelled_delta(
        labelled(ctx.client, ctx.proxy, "cachescout_actions_total"), a0, ("kind", "outcome"), 'reason="tool_resume"'
    )
    ctx.log(f"   proxy:  {proxied}")
    s1 = debug_state(ctx.client, ctx.proxy, ctx.admin_token)
    if s1:  # diagnostics, not judged (each round's planner skips are in its `planner_skips`)
        ctx.log(f"   proxy self-evaluation: {s1.get('self_evaluation')}")
        ctx.log(f"   proxy recent actions: {s1.get('recent_actions')}")
    ctx.notes["tool_pause"] = {"direct": direct, "proxy": proxied}
    evicted_ok = direct["resume_cached"] < direct["expect"]
    ok = evicted_ok and proxied["resume_cached"] >= proxied["expect"] > 0
    why = "" if evicted_ok else " (control did not lose the context: eviction traffic too small, inconclusive)"
    earlier = ", ".join(f"{r['resume_cached']}/{r['expect']}" for r in proxied["rounds"][:-1])
    return ok, (
        f"paused context = {proxied['expect']} tokens in full blocks; last resume cached_tokens direct "
        f"{direct['resume_cached']} (TTFT {direct['resume_ttft_ms']} ms), through proxy "
        f"{proxied['resume_cached']} (TTFT {proxied['resume_ttft_ms']} ms); each tool ran ~{tool_s:.0f} s "
        f"(last {proxied['tool_ms']} ms) while {proxied['evictor_tokens']} other tokens went through "
        f"(in {proxied['traffic_ms']} ms); warmup tokens vLLM prefilled during that traffic "
        f"{proxied['extra_tokens_during_traffic']}, after it {proxied['extra_tokens_after_traffic']}; "
        f"earlier resumes through proxy (cached/expected): {earlier or 'none'}; "
        f"proxy tool_resume actions {proxied['proxy_actions']}{why}"
    )


def check_cache_salt(ctx) -> tuple[bool, str]:
    agent = ctx.agents[1]
    msgs = _turn(agent, "c5")
    expect = _anchor_expectation(ctx, agent, msgs)
    problems: list[str] = []
    # (a) the adapter warms tenant X's anchor; Y, and no tenant at all, must not hit; X must.
    reset_prefix_cache(ctx.client, ctx.vllm)
    result, _ = asyncio.run(
        _adapter_warm(ctx.vllm, ctx.model, _body(ctx.model, msgs, agent.tools, salt="tenant-x"), "tenant-x")
    )
    if not result.ok:
        problems.append(f"adapter warm failed: {result.error}")
    got = {}
    for salt in ("tenant-y", "tenant-x", None):  # X before "none": the tiny cache would evict X's tail
        r = stream_chat(ctx.client, ctx.vllm, _body(ctx.model, msgs, agent.tools, salt=salt))
        got[salt or "none"] = r.cached_tokens
    ctx.log(f"   adapter warm for tenant-x; cached_tokens by tenant: {got}")
    if got["tenant-y"] or got["none"]:
        problems.append(f"tenant-x's warmup made another tenant hit: {got}")
    if got["tenant-x"] < expect:
        problems.append(f"tenant-x's own request did not hit its warmed anchor ({got['tenant-x']} < {expect})")
    detail = f"adapter: anchor {expect} tokens; cached_tokens after tenant-x warmup: {got}"
    # (b) through the proxy, using the chain it learned for team-x in check 3 (if it ran).
    if "proxy_counters" in ctx.notes:
        planner, researcher = ctx.agents[0], ctx.agents[1]
        task = {"role": "user", "content": "Task c5p: " + text("t:c5p", 60)}
        reset_prefix_cache(ctx.client, ctx.vllm)
        stream_chat(
            ctx.client,
            ctx.proxy,
            _body(ctx.model, [*planner.anchor_messages(), task], planner.tools, salt="team-x"),
            headers={SESSION_HEADER: "c5p"},
        )
        time.sleep(ctx.gap * 2)
        nxt = [*researcher.anchor_messages(), task, {"role": "user", "content": "[planner] " + text("r:c5p", 45)}]
        proxy_got = {}
        for salt, sid in (("team-y", "c5p-y"), ("team-x", "c5p")):
            r = stream_chat(
                ctx.client, ctx.proxy, _body(ctx.model, nxt, researcher.tools, salt=salt), headers={SESSION_HEADER: sid}
            )
            proxy_got[salt] = r.cached_tokens
        ctx.log(f"   proxy-learned warmup (team-x planner -> researcher); cached_tokens by tenant: {proxy_got}")
        if proxy_got["team-y"]:
            problems.append(f"proxy's warmups for team-x made team-y hit: {proxy_got}")
        warmed = "warmed" if proxy_got["team-x"] else "NOT warmed (no learned warmup happened: inconclusive)"
        detail += f"; through the proxy: team-y {proxy_got['team-y']}, team-x {proxy_got['team-x']} ({warmed})"
    else:
        detail += "; proxy variant not run (needs check 3's learned chain)"
    return (not problems), detail + ("; " + "; ".join(problems) if problems else "")
