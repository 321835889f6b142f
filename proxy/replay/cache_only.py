"""Cache-only replay: request-granular hit rates with no engine timing (`cachescout replay --cache-only`).

Why a second mode: the shared traces' reference figures (`../shared/traces/README.md`) are defined on
a bare cache, not on an engine: requests in arrival order, each hits on the longest resident prefix
of *all* its `hash_ids`, then all its blocks are inserted or touched at once; nothing is in flight.
The engine-mode replay (`engine_run.py`) is a different experiment: a request holds its blocks while
it prefills and decodes (so the running set shrinks the cache the others see), only full blocks are
cached and the last prompt token is always recomputed (a hit stops at `(prompt - 1) // block`),
decode tails take slots, and a request waits for admission. Its figures are the engine's and differ
from the references by design (docs/claude-code.md, "Why engine mode differs"). This module is the
reference semantics, so its figures must match the README's exactly (tests/replay/test_cache_only.py).

Policies (all at `capacity` blocks; hit rate = prefix-hit blocks / all block accesses):
- `lru`: `BlockPool.access` (vLLM's free queue; a request's blocks are touched deepest-first, so its
  prefix ends most recent);
- `belady`: block-level MIN with bypass (`belady.belady_hits`), an upper bound for prefix caching;
- session references (a block belongs to the session that last named it; eviction takes whole
  sessions' blocks, deepest first, in a session order, recomputed once per request):
  - `session-oracle`: the session whose next request is furthest in the future goes first (sessions
    that never return first of all), knowing that time exactly;
  - `session-oracle-blind`: knows WHICH sessions return, not WHEN: sessions that never return first,
    then the least recently active;
  - `session-pauses`: knows only what a proxy sees: the stop reason of the session's last response
    and the pauses learned so far (response end -> next request, per stop reason, causally); a
    session's predicted return is the median of the learned pauses of its kind *longer than the time
    it has already been away* (none longer: it is taken as gone and goes first).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence

from proxy.cachemodel.block_pool import BlockPool
from proxy.replay.belady import belady_hits
from proxy.replay.traces import ReplayRequest

SESSION_POLICIES = ("session-oracle", "session-oracle-blind", "session-pauses")
CACHE_ONLY_POLICIES = ("lru", *SESSION_POLICIES, "belady")
MIN_PAUSES = 3  # learned pauses of a kind before `session-pauses` trusts them


def lru_hits(block_lists: Sequence[Sequence[int]], capacity: int) -> list[int]:
    pool = BlockPool(capacity)
    return [pool.access(b, 0.0) for b in block_lists]


class _PauseBook:
    """Pauses seen so far, per stop kind, sorted (causal: added when the next request arrives)."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}

    def add(self, kind: str, gap: float) -> None:
        bisect.insort(self.samples.setdefault(kind, []), max(0.0, gap))

    def remaining(self, kind: str, away: float) -> float | None:
        """Median of the learned pauses longer than `away`, minus `away`; None when unknown (too
        few samples); inf when no learned pause was that long (the session is taken as gone)."""
        xs = self.samples.get(kind, [])
        if len(xs) < MIN_PAUSES:
            return None
        k = bisect.bisect_right(xs, away)
        if k >= len(xs):
            return math.inf
        return xs[(k + len(xs)) // 2] - away


def session_hits(
    requests: Sequence[ReplayRequest],
    capacity: int,
    policy: str = "session-oracle",
    response_ends: Sequence[float] | None = None,
) -> list[int]:
    """Prefix-hit block count per request under a session eviction order (see the module doc).
    `response_ends[i]`: when request i's response ended (e.g. its arrival + the trace's API time);
    defaults to the arrival, as requests are instantaneous in this mode (the CLI's default: pauses
    are then arrival gaps). Only `session-pauses` reads it (how long a session has been away)."""
    if policy not in SESSION_POLICIES:
        raise ValueError(f"unknown session policy {policy!r}; choose from {SESSION_POLICIES}")
    n = len(requests)
    sess = [r.session_id if r.session_id is not None else f"#{i}" for i, r in enumerate(requests)]
    nxt = [math.inf] * n  # arrival of the session's next request
    last_of: dict[str, int] = {}
    for i in range(n - 1, -1, -1):
        j = last_of.get(sess[i])
        nxt[i] = requests[j].t if j is not None else math.inf
        last_of[sess[i]] = i
    ends = response_ends if response_ends is not None else [r.t for r in requests]

    owner: dict[int, str] = {}  # resident block -> the session that last named it
    tails: dict[str, list[tuple[int, int]]] = {}  # session -> heap of (-depth, block), lazy
    state: dict[str, tuple[int, float]] = {}  # session -> (its last request, when it was last active)
    pauses = _PauseBook()
    used = 0
    out: list[int] = []
    push, pop = heapq.heappush, heapq.heappop

    def key(s: str, now: float) -> float:
        """Larger = evicted sooner."""
        last, active = state[s]
        if policy == "session-oracle":
            return nxt[last]
        if policy == "session-oracle-blind":
            return math.inf if nxt[last] == math.inf else now - active
        stop = requests[last].finish_reason or ""
        away = max(0.0, now - ends[last])
        rem = pauses.remaining(stop, away)
        return now + (rem if rem is not None else 0.0)  # unknown: expected back now (LRU-like order)

    for i, r in enumerate(requests):
        blocks = r.block_hashes
        s = sess[i]
        hit = 0
        for h in blocks:
            if h not in owner:
                break
            hit += 1
        out.append(hit)
        prev = state.get(s)
        if prev is not None:
            pauses.add(requests[prev[0]].finish_reason or "", r.t - ends[prev[0]])
        state[s] = (i, r.t)
        missing = []
        heap = tails.setdefault(s, [])
        for d, h in enumerate(blocks):
            o = owner.get(h)
            if o is None:
                missing.append((d, h))
            elif o != s:
                owner[h] = s
                push(heap, (-d, h))
        need = used + len(missing) - capacity
        if need > 0:
            mine = set(blocks)
            order = sorted((x for x in tails if tails[x]), key=lambda x: (-key(x, r.t), state[x][1]))
            for victim in order:
                if need <= 0:
                    break
                if victim == s:
                    # the request holds its own blocks; its session's stale ones (a context the
                    # session left behind) go at the session's place in the order, deepest first
                    stale = sorted({(nd, b) for nd, b in tails[s] if owner.get(b) == s and b not in mine})
                    for _nd, b in stale[:need]:
                        del owner[b]
                        used -= 1
                        need -= 1
                    continue
                vh = tails[victim]
                while vh and need > 0:
                    _negd, b = vh[0]
                    if owner.get(b) != victim:
                        pop(vh)
                        continue
                    pop(vh)
                    del owner[b]
                    used -= 1
                    need -= 1
            if need > 0:  # a prompt longer than the cache: its first blocks are kept (as LRU's)
                missing = missing[: max(0, len(missing) - need)]
        for d, h in missing:
            owner[h] = s
            push(heap, (-d, h))
            used += 1
        if len(heap) > 4 * (len(blocks) + 64):  # compact stale entries
            tails[s] = [(nd, b) for nd, b in heap if owner.get(b) == s]
            heapq.heapify(tails[s])
    return out


def cache_only_hits(
    requests: Sequence[ReplayRequest], capacity: int, policy: str, response_ends: Sequence[float] | None = None
) -> list[int]:
    """Prefix-hit blocks per request for one policy of `CACHE_ONLY_POLICIES`."""
    lists = [r.block_hashes for r in requests]
    if policy == "lru":
        return lru_hits(lists, capacity)
    if policy == "belady":
        return belady_hits(lists, capacity)
    return session_hits(requests, capacity, policy, response_ends)


def cache_only_rates(
    requests: Sequence[ReplayRequest],
    capacities: Sequence[int],
    policies: Sequence[str] = CACHE_ONLY_POLICIES,
    response_ends: Sequence[float] | None = None,
) -> dict[int, dict[str, float]]:
    """Hit rate (prefix-hit blocks / block accesses) per capacity and policy."""
    total = sum(len(r.block_hashes) for r in requests) or 1
    return {
        int(c): {p: sum(cache_only_hits(requests, int(c), p, response_ends)) / total for p in policies}
        for c in capacities
    }


def run_cache_only(
    requests: Sequence[ReplayRequest], capacities: Sequence[int], policies: Sequence[str], source: dict, args
) -> int:
    """`cachescout replay --cache-only`: hit rates per capacity and policy into OUT/report.json
    (`results.capacities[].policies.<name>.hit_rate`) and a short report.md."""
    import json
    import time
    from pathlib import Path

    names = list(dict.fromkeys(["lru", *policies, "belady"]))
    t0 = time.perf_counter()
    total = sum(len(r.block_hashes) for r in requests)
    rows: list[dict] = []
    for cap in capacities:
        pols = {}
        for name in names:
            t1 = time.perf_counter()
            hits = sum(cache_only_hits(requests, int(cap), name))
            pols[name] = {
                "hit_rate": hits / total if total else 0.0,
                "hit_blocks": hits,
                "replay_seconds": round(time.perf_counter() - t1, 3),
            }
        rows.append({"capacity_blocks": int(cap), "policies": pols})
    results = {
        "mode": "cache-only",
        "policies": names,
        "capacities": rows,
        "requests": len(requests),
        "block_accesses": total,
        "unique_blocks": len({h for r in requests for h in r.block_hashes}),
    }
    meta = {"title": args.trace, "source": source, "elapsed_s": round(time.perf_counter() - t0, 3)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    md = [
        f"# cache-only replay: {args.trace}",
        "",
        f"{len(requests)} requests, {total} block accesses, {results['unique_blocks']} unique blocks",
        "",
        "| capacity (blocks) | " + " | ".join(names) + " |",
        "| --- |" + " --- |" * len(names),
    ]
    for row in rows:
        md.append(
            f"| {row['capacity_blocks']} | " + " | ".join(f"{row['policies'][n]['hit_rate']:.3f}" for n in names) + " |"
        )
        print(
            f"capacity {row['capacity_blocks']} blocks: "
            + "  ".join(f"{n} {row['policies'][n]['hit_rate']:.4f}" for n in names)
        )
    (out / "report.md").write_text("\n".join(md) + "\n")
    print(f"report: {out / 'report.md'}")
    return 0
