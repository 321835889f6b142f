"""Seeded multi-agent workload generators (the presets: workload_presets.py, re-exported here).

Why: the public traces (Mooncake) carry session continuation but no agent structure, so whether
agent foreknowledge pays has to be measured on generated traffic shaped like the workloads in the
CacheScout paper: a 6-agent AutoGen-style group chat where every agent's prompt is its fixed
context (system prompt + tool schemas: the *anchor*, 53–62% of prompt tokens) followed by the
session's shared, append-only history; a supervisor picks who speaks next with tunable
predictability; some agents call tools and resume after the tool ran; many sessions run at once.

Block model (`block_size` tokens per block, chained hashes as vLLM's prefix cache has them):
agent a's prompt in session s at step k is `anchor_a + H_s[0:k]`. Anchor blocks are shared by
every session (chain of the agent's content); history blocks are chained after the anchor, so
they are per-(agent, session) and each request extends that pair's previous prompt. The last,
partial block carries its fill level in the hash, so it never hits (vLLM caches full blocks only).

Timing is open loop: session starts are Poisson, at the rate that makes the engine's cold prefill
work (every prompt computed from scratch, cost model) a `load` share of the span — or, with
`load=None`, at the rate that keeps `concurrency` sessions live on average (Little's law);
inside a session the next request follows the previous one's nominal latency plus a small
orchestration gap, or the tool's duration after a tool call. The same seed
gives the same stream.
"""

from __future__ import annotations

import random
from dataclasses import replace

import xxhash

from proxy.cachemodel.cost_model import CostModel
from proxy.replay.traces import ReplayRequest
from proxy.replay.workload_presets import PAPER_PRESETS, PRESETS, TOPOLOGIES, WorkloadSpec, preset

# the presets live in workload_presets.py; importers of this module keep finding them here
__all__ = ["PAPER_PRESETS", "PRESETS", "TOPOLOGIES", "WorkloadSpec", "generate", "preset", "session_request"]

# decode work per output token in the busy-share rate: one row of a batch of this size (a nominal
# decode batch, fixed so that a preset's arrival rate never depends on the engine model)
_BUSY_DECODE_BATCH = 16


def _h(parent: int, *key) -> int:
    return xxhash.xxh3_64_intdigest(repr(key).encode(), seed=parent)


class _Chains:
    """Hash chains, extended incrementally: anchors per agent, histories per (agent, session)."""

    def __init__(self, spec: WorkloadSpec, anchor_sizes: list[int]):
        self.bs = spec.block_size
        self.anchor: list[tuple[int, ...]] = []
        for a, size in enumerate(anchor_sizes):
            chain, parent = [], _h(spec.seed, "root")
            for i in range(size // self.bs):
                parent = _h(parent, "anchor", a, i)
                chain.append(parent)
            self.anchor.append(tuple(chain))
        self.hist: dict[tuple[int, int], list[int]] = {}
        self.anchor_tokens = [len(a) * self.bs for a in self.anchor]

    def prompt(self, agent: int, session: int, hist_tokens: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        bs = self.bs
        anchor = self.anchor[agent]
        chain = self.hist.setdefault((agent, session), [])
        full = hist_tokens // bs
        parent = chain[-1] if chain else (anchor[-1] if anchor else 0)
        while len(chain) < full:
            parent = _h(parent, "hist", session, len(chain))
            chain.append(parent)
        hashes = anchor + tuple(chain[:full])
        tokens = [bs] * len(hashes)
        rest = hist_tokens - full * bs
        if rest:
            tail_parent = chain[full - 1] if full else (anchor[-1] if anchor else 0)
            hashes += (_h(tail_parent, "partial", session, full, rest),)
            tokens.append(rest)
        return hashes, tuple(tokens)


def _branch(
    chains: _Chains, agent: int, session: int, hist_tokens: int, key: tuple, branch_tokens: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A fan-out branch: the parent (anchor + the history's full blocks) + the branch's own blocks."""
    bs = chains.bs
    all_hashes, all_tokens = chains.prompt(agent, session, hist_tokens)
    full = len(chains.anchor[agent]) + hist_tokens // bs
    hashes, tokens = list(all_hashes[:full]), list(all_tokens[:full])
    parent = hashes[-1] if hashes else 0
    for j in range(max(1, -(-branch_tokens // bs))):
        parent = _h(parent, "branch", *key, j)
        hashes.append(parent)
        tokens.append(bs)
    return tuple(hashes), tuple(tokens)


def random_cycle(agents: int, rng: random.Random) -> list[int]:
    """The supervisor's scripted successor of each agent (a random cycle over the agents);
    shared with the live demo's workload so both script the same kind of group chat."""
    order = list(range(agents))
    rng.shuffle(order)
    nxt = [0] * agents
    for i, a in enumerate(order):
        nxt[a] = order[(i + 1) % agents]
    return nxt


def _mix(mix: tuple[tuple[float, float, float], ...], rng: random.Random) -> float:
    """A draw from a mixture of log-uniform ranges: (weight, lo, hi) per component."""
    u = rng.random() * sum(w for w, _, _ in mix)
    pick = mix[-1]
    for comp in mix:
        if u < comp[0]:
            pick = comp
            break
        u -= comp[0]
    _, lo, hi = pick
    return lo * (hi / lo) ** rng.random()


def _next_agent(spec: WorkloadSpec, cur: int | None, step: int, script: list[int], rng: random.Random) -> int:
    n = spec.agents
    if spec.topology == "solo":  # one agent per session, picked at its start
        return cur if cur is not None else rng.randrange(n)
    if spec.topology == "pipeline":
        return step % n
    if spec.topology == "debate":  # debaters 0 and 1 alternate; judge 2 every third turn
        if cur is None:
            return 0
        if step % 3 == 2:
            return 2 if rng.random() < spec.predictability else rng.randrange(n)
        base = 1 if cur == 0 else 0
        return base if rng.random() < spec.predictability else rng.randrange(n)
    if spec.topology == "random" or cur is None:
        return rng.randrange(n)
    if spec.topology == "selector":
        return script[cur] if rng.random() < spec.predictability else rng.randrange(n)
    raise ValueError(f"unknown topology {spec.topology!r}; expected one of {TOPOLOGIES}")


def session_request(
    spec: WorkloadSpec,
    chains: _Chains,
    sid: int,
    agent: int,
    hist: int,
    out_tokens: int,
    finish: str | None,
    tool_s: float | None,
    category: str = "agent",
    prompt: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
) -> tuple[ReplayRequest, float]:
    """Session ``sid``'s request by ``agent`` over ``hist`` session tokens (or over ``prompt``'s
    blocks: a fan-out branch), time set by the caller, and its nominal latency (prefill + decode at
    the spec's rates): the next request's offset."""
    hashes, tokens = prompt if prompt is not None else chains.prompt(agent, sid, hist)
    req = ReplayRequest(
        t=0.0,
        tenant="",
        block_hashes=hashes,
        block_tokens=tokens,
        output_tokens=out_tokens,
        session_id=f"{spec.name}-{sid}",
        agent=f"agent{agent}",
        category=category,
        anchor_blocks=len(chains.anchor[agent]),
        finish_reason=finish,
        tool_seconds=tool_s,
    )
    return req, sum(tokens) / spec.prefill_tokens_per_s + out_tokens / spec.decode_tokens_per_s


def _session(
    spec: WorkloadSpec, sid: int, chains: _Chains, script: list[int], sel_agent: int | None, rng: random.Random
) -> list[tuple[float, ReplayRequest]]:
    """One session's requests with times relative to its start."""
    out: list[tuple[float, ReplayRequest]] = []
    t = 0.0
    hist = rng.randint(*spec.task_tokens)
    steps = rng.randint(*spec.steps)
    cur: int | None = None

    def emit(
        agent: int, out_tokens: int, finish: str | None = None, tool_s: float | None = None, category: str = "agent"
    ) -> float:
        req, latency = session_request(spec, chains, sid, agent, hist, out_tokens, finish, tool_s, category)
        out.append((t, req))
        return latency

    reserve = max(chains.anchor_tokens) + 2 * (spec.reply_tokens[1] + spec.tool_result_tokens[1] + spec.user_tokens[1])
    for step in range(steps):
        if spec.max_context_tokens and hist + reserve > spec.max_context_tokens:
            break  # the context is full: the agent stops here
        if step and spec.user_tokens[1] > 0:
            hist += rng.randint(*spec.user_tokens)
        if spec.second_user_turn and step == steps // 2:
            hist += rng.randint(*spec.task_tokens)
        if sel_agent is not None:  # the supervisor's own call picks the speaker
            t += emit(sel_agent, 8, category="selector") + spec.gap_seconds
        cur = _next_agent(spec, cur, step, script, rng)
        reply = rng.randint(*spec.reply_tokens)
        if spec.fanout > 1 and rng.random() < spec.fanout_prob:
            # the turn forks: branches start `fanout_stagger_s` apart on the same parent, their
            # results join the history when the slowest is done
            end, joined = t, 0
            for b in range(spec.fanout):
                out_tokens = rng.randint(*spec.reply_tokens)
                branch = _branch(chains, cur, sid, hist, (sid, step, b), rng.randint(*spec.branch_tokens))
                start = t + b * spec.fanout_stagger_s
                req, latency = session_request(spec, chains, sid, cur, hist, out_tokens, "stop", None, "branch", branch)
                out.append((start, req))
                end = max(end, start + latency)
                joined += out_tokens // 2
            hist += joined
            t = end + spec.gap_seconds
            continue
        uses_tool = spec.tool_from <= cur <= spec.tool_agents and rng.random() < spec.tool_prob
        if uses_tool:
            if spec.pause_mix:
                tool_s = _mix(spec.pause_mix, rng)
            else:
                lo, hi = spec.tool_seconds
                tool_s = lo * (hi / lo) ** rng.random()
            call_tokens = min(reply, 60)
            t += emit(cur, call_tokens, "tool_calls", tool_s) + tool_s
            hist += call_tokens + rng.randint(*spec.tool_result_tokens)
        t += emit(cur, reply, "stop") + (_mix(spec.gap_mix, rng) if spec.gap_mix else spec.gap_seconds)
        hist += reply
    return out


def generate(spec: WorkloadSpec) -> list[ReplayRequest]:
    """The workload's request stream, time ordered. Same spec (seed included) -> same stream."""
    if spec.topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {spec.topology!r}; expected one of {TOPOLOGIES}")
    if spec.tool_rounds > 0:
        from proxy.replay.workloads_demo import generate_demo

        return generate_demo(spec)
    rng = random.Random(spec.seed)
    n_agents = spec.agents + (1 if spec.selector_calls else 0)
    bs = spec.block_size
    sizes = [max(bs, rng.randint(*spec.anchor_tokens) // bs * bs) for _ in range(n_agents)]
    chains = _Chains(spec, sizes)
    script = random_cycle(spec.agents, rng)
    sel_agent = spec.agents if spec.selector_calls else None
    sessions = [_session(spec, s, chains, script, sel_agent, rng) for s in range(spec.sessions)]
    mean_len = sum(s[-1][0] for s in sessions if s) / max(1, len(sessions))
    if spec.busy:
        from proxy.replay.regimes import session_work_s

        # steady state: busy share = session-arrival rate × work per session (so the rate is
        # proportional to `busy` and the sessions, pauses included, are the same at every busy)
        work = session_work_s(sessions, CostModel(), _BUSY_DECODE_BATCH)
        rate = spec.busy * len(sessions) / max(work, 1e-6)
    elif spec.load:
        cost = CostModel()
        cold = sum(cost.prefill_s(r.prompt_tokens) for sess in sessions for _, r in sess)
        rate = len(sessions) / max(cold / spec.load - mean_len, mean_len / len(sessions), 1e-6)
    else:
        rate = spec.concurrency / max(mean_len, 1e-6)  # Little's law: L = λ·W
    out: list[tuple[float, int, ReplayRequest]] = []
    start = 0.0
    seq = 0
    for sess in sessions:
        for rel, req in sess:
            out.append((start + rel, seq, req))
            seq += 1
        start += rng.expovariate(rate)
    out.sort(key=lambda x: (x[0], x[1]))
    return [replace(req, t=round(t, 6)) for t, _, req in out]


def anchor_share(requests: list[ReplayRequest]) -> float:
    """Token-weighted share of prompt tokens that are agent anchors (the paper reports 53–62%)."""
    anchor = total = 0
    for r in requests:
        anchor += sum(r.block_tokens[: r.anchor_blocks])
        total += r.prompt_tokens
    return anchor / total if total else 0.0


def describe(spec: WorkloadSpec, requests: list[ReplayRequest]) -> dict:
    """Summary numbers for the report."""
    span = requests[-1].t - requests[0].t if requests else 0.0
    return {
        "preset": spec.name,
        "topology": spec.topology,
        "agents": spec.agents,
        "predictability": spec.predictability,
        "sessions": spec.sessions,
        "seed": spec.seed,
        "requests": len(requests),
        "span_s": round(span, 3),
        "request_rate": round(len(requests) / span, 3) if span > 0 else 0.0,
        "anchor_share": round(anchor_share(requests), 4),
        "tool_calls": sum(1 for r in requests if r.finish_reason == "tool_calls"),
        "prompt_tokens": sum(r.prompt_tokens for r in requests),
    }
