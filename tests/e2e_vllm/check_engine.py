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

from vclient import common_prefix, full_blocks, reset_prefix_cache, stream_chat, tokenize
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


def _evict(ctx, base: str, tag: str, n: int = 3, salt: str | None = None) -> int:
    """Unrelated traffic (other agents, other sessions) big enough to push everything out of the cache."""
    total = 0
    for i in range(n):
        agent = make_agent(f"bystander{i}", words=150)
        r = stream_chat(ctx.client, base, _body(ctx.model, _turn(agent, f"{tag}-ev{i}", history=5), agent.tools,
                                                salt=salt), headers={SESSION_HEADER: f"{tag}-ev{i}"})
        if r.status != 200:
            raise RuntimeError(f"evictor request answered {r.status}: {r.error}")
        total += r.prompt_tokens
    return total


def _anchor_expectation(ctx, agent, messages: list[dict]) -> int:
    """Whole blocks of the agent's anchor (system + tools, as vLLM tokenizes it) that `messages` shares."""
    anchor = tokenize(ctx.client, ctx.vllm, ctx.model, agent.anchor_messages(), list(agent.tools),
                      add_generation_prompt=False)
    full = tokenize(ctx.client, ctx.vllm, ctx.model, messages, list(agent.tools))
    return full_blocks(common_prefix(anchor, full))


async def _adapter_warm(vllm: str, model: str, body: dict, tenant: str):
    """Warm `body`'s anchor exactly as the live proxy would: its view's anchor payload, VllmAdapter.warm."""
    from proxy.core.actions import Action
    from proxy.core.fingerprint import view_from_openai
    from proxy.engines.vllm import VllmAdapter

    view = view_from_openai("/v1/chat/completions", body, {})
    if view is None or not view.anchor_blocks:
        raise RuntimeError("proxy.core.fingerprint built no anchor for the request")
    now = time.monotonic()
    action = Action(kind="warm", reason="transition", tenant=tenant, anchor_id="e2e",
                    block_hashes=view.block_hashes[:view.anchor_blocks], tokens=sum(view.block_tokens[:view.anchor_blocks]),
                    payload=view.anchor_payload, priority=0, created=now, deadline=now + 30)
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
    return ok, (f"anchor = {expect} tokens in full blocks; next request cached_tokens without warmup "
                f"{cached['control']}, after VllmAdapter.warm {cached['warm']}")


def _tool_pause(ctx, base: str, tag: str, quiet_s: float) -> dict:
    agent = next(a for a in ctx.agents if a.name == "coder")
    msgs = _turn(agent, f"{tag}-tool", history=4)
    sid = {SESSION_HEADER: f"{tag}-tool"}
    reset_prefix_cache(ctx.client, ctx.vllm)
    r1 = stream_chat(ctx.client, base, _body(ctx.model, msgs, agent.tools, max_tokens=64,
                                             structured_outputs={"regex": TOOL_REGEX}), headers=sid)
    if r1.status != 200 or r1.finish_reason != "tool_calls" or not r1.tool_calls:
        raise RuntimeError(f"could not get a tool_calls response from vLLM: status {r1.status}, "
                           f"finish {r1.finish_reason}, error {r1.error}")
    t_pause = time.perf_counter()
    evicted = _evict(ctx, base, tag)          # the tool runs; other agents keep the engine busy
    time.sleep(quiet_s)                       # ... and the tool is still running
    tool_ms = 1000 * (time.perf_counter() - t_pause)
    calls = [{"id": tc.get("id", f"call{i}"), "type": "function", "function": tc["function"]}
             for i, tc in enumerate(r1.tool_calls)]
    resume = [*msgs, {"role": "assistant", "content": None, "tool_calls": calls}]
    resume += [{"role": "tool", "tool_call_id": c["id"], "content": "exit 0: 212 passed"} for c in calls]
    expect = full_blocks(common_prefix(tokenize(ctx.client, ctx.vllm, ctx.model, msgs, list(agent.tools)),
                                       tokenize(ctx.client, ctx.vllm, ctx.model, resume, list(agent.tools))))
    r2 = stream_chat(ctx.client, base, _body(ctx.model, resume, agent.tools), headers=sid)
    if r2.status != 200:
        raise RuntimeError(f"resume answered {r2.status}: {r2.error}")
    return {"paused_prompt": r1.prompt_tokens, "expect": expect, "resume_cached": r2.cached_tokens,
            "resume_prompt": r2.prompt_tokens, "resume_ttft_ms": round(1000 * (r2.ttft or 0)),
            "evictor_tokens": evicted, "tool_ms": round(tool_ms)}


def check_tool_pause(ctx, quiet_s: float = 2.5) -> tuple[bool, str]:
    direct = _tool_pause(ctx, ctx.vllm, "c4d", quiet_s)
    ctx.log(f"   direct: {direct}")
    proxied = _tool_pause(ctx, ctx.proxy, "c4p", quiet_s)
    ctx.log(f"   proxy:  {proxied}")
    ctx.notes["tool_pause"] = {"direct": direct, "proxy": proxied}
    evicted_ok = direct["resume_cached"] < direct["expect"]
    ok = evicted_ok and proxied["resume_cached"] >= proxied["expect"] > 0
    why = "" if evicted_ok else " (control did not lose the context: eviction traffic too small, inconclusive)"
    return ok, (f"paused context = {proxied['expect']} tokens in full blocks; resume cached_tokens direct "
                f"{direct['resume_cached']} (TTFT {direct['resume_ttft_ms']} ms), through proxy "
                f"{proxied['resume_cached']} (TTFT {proxied['resume_ttft_ms']} ms); tool ran "
                f"{proxied['tool_ms']} ms while {proxied['evictor_tokens']} other tokens went through{why}")


def check_cache_salt(ctx) -> tuple[bool, str]:
    agent = ctx.agents[1]
    msgs = _turn(agent, "c5")
    expect = _anchor_expectation(ctx, agent, msgs)
    problems: list[str] = []
    # (a) the adapter warms tenant X's anchor; Y, and no tenant at all, must not hit; X must.
    reset_prefix_cache(ctx.client, ctx.vllm)
    result, _ = asyncio.run(_adapter_warm(ctx.vllm, ctx.model, _body(ctx.model, msgs, agent.tools, salt="tenant-x"),
                                          "tenant-x"))
    if not result.ok:
        problems.append(f"adapter warm failed: {result.error}")
    got = {}
    for salt in ("tenant-y", "tenant-x", None):     # X before "none": the tiny cache would evict X's tail
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
        stream_chat(ctx.client, ctx.proxy, _body(ctx.model, [*planner.anchor_messages(), task], planner.tools,
                                                 salt="team-x"), headers={SESSION_HEADER: "c5p"})
        time.sleep(ctx.gap * 2)
        nxt = [*researcher.anchor_messages(), task, {"role": "user", "content": "[planner] " + text("r:c5p", 45)}]
        proxy_got = {}
        for salt, sid in (("team-y", "c5p-y"), ("team-x", "c5p")):
            r = stream_chat(ctx.client, ctx.proxy, _body(ctx.model, nxt, researcher.tools, salt=salt),
                            headers={SESSION_HEADER: sid})
            proxy_got[salt] = r.cached_tokens
        ctx.log(f"   proxy-learned warmup (team-x planner -> researcher); cached_tokens by tenant: {proxy_got}")
        if proxy_got["team-y"]:
            problems.append(f"proxy's warmups for team-x made team-y hit: {proxy_got}")
        warmed = "warmed" if proxy_got["team-x"] else "NOT warmed (no learned warmup happened: inconclusive)"
        detail += f"; through the proxy: team-y {proxy_got['team-y']}, team-x {proxy_got['team-x']} ({warmed})"
    else:
        detail += "; proxy variant not run (needs check 3's learned chain)"
    return (not problems), detail + ("; " + "; ".join(problems) if problems else "")
