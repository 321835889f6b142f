"""Issue 22: agents and the prefix index are bounded in *real* bytes, not only in counted bytes.

tracemalloc measures what each structure really retains (everything allocated while it was built
that is freed when it goes), and the tests check that the estimate the budget is enforced on
matches it, on the shapes that stress it: node-heavy (adversarial, one- and few-block branches)
and hash-heavy (long chains) prefix trees, and agents with multi-megabyte system prompts.
"""

from __future__ import annotations

import gc
import json
import random
import tracemalloc
from collections.abc import Callable, Iterator

import pytest

from proxy.core import PolicyConfig, ScoutPolicy
from proxy.core.fingerprint import view_from_openai
from proxy.core.prefix_index import PrefixIndex
from proxy.core.residency import ResidencyShadow
from proxy.core.view import view_from_blocks


def retained(build: Callable[[], object]) -> tuple[object, int]:
    """(the object built, bytes it retains): traced memory with it alive minus after it is freed."""
    gc.collect()
    tracemalloc.start()
    try:
        obj = build()
        gc.collect()
        alive = tracemalloc.get_traced_memory()[0]
        info = obj
        del obj
        stats = _stats(info)
        del info
        gc.collect()
        return stats, alive - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


def _stats(obj: object) -> object:
    if isinstance(obj, PrefixIndex):
        return obj.stats()
    if isinstance(obj, ResidencyShadow):
        return {"entries": len(obj), "queue": len(obj._qs)}
    assert isinstance(obj, ScoutPolicy)
    reg = obj.agents
    return {"agents": len(reg), "agent_bytes": reg.bytes, "index": reg.index.stats(), "dropped": reg.dropped_for_bytes}


def _chains(shape: str, n: int, rng: random.Random) -> Iterator[tuple[int, ...]]:
    h = rng.getrandbits
    if shape == "one_block":  # every prompt its own one-block leaf: the most nodes per hash
        for _ in range(n):
            yield (h(64),)
    elif shape == "branchy":  # random stems of a growing pool, one fresh block after: splits everywhere
        pool = [tuple(h(64) for _ in range(8))]
        for _ in range(n):
            stem = pool[rng.randrange(len(pool))]
            chain = stem[: rng.randrange(1, len(stem) + 1)] + (h(64),)
            if rng.random() < 0.3:
                pool.append(chain + tuple(h(64) for _ in range(3)))
            yield chain
    elif shape.startswith("star"):  # one stem, every prompt its own tail of 1..N blocks (issue 39's probe)
        stem = tuple(h(64) for _ in range(4))
        tail = int(shape.removeprefix("star"))
        for _ in range(n):
            yield stem + tuple(h(64) for _ in range(rng.randrange(1, tail + 1)))
    elif shape == "adversarial":  # tests/fault: branches off a 64-block stem at every block
        stem = tuple(h(64) for _ in range(64))
        for k in range(n):
            yield stem[: (k * 7919) % 64] + (h(64),)
    else:  # long chains: hash-dominated
        for _ in range(n):
            yield tuple(h(64) for _ in range(rng.randrange(1, 200)))


@pytest.mark.parametrize("shape", ["one_block", "branchy", "long", "star1", "star4", "star16", "star64", "adversarial"])
def test_prefix_index_counted_bytes_match_real_bytes(shape):
    """Before (200 B a node): 16 MiB counted was 32-38 MB real for node-heavy trees. Issue 39: with
    540 B a node (dict entries included) star-shaped sets were 6-11% over the count; the dicts are
    now charged at their real size: within 5% on every shape but the synthetic branchy one, which
    is over-counted by 5-6% (the safe side: its nodes carry fewer source ints)."""
    budget = 1 << 20

    def build() -> PrefixIndex:  # the chains are made in here: the hashes the index keeps are traced
        idx = PrefixIndex(budget)
        for i, c in enumerate(_chains(shape, 12_000, random.Random(7))):
            idx.observe(f"t{i % 3}", c, None, float(i))
        return idx

    stats, real = retained(build)
    assert isinstance(stats, dict)
    counted = stats["bytes"]
    assert counted <= budget and stats["evicted"] > 0
    low = 0.92 if shape == "branchy" else 0.95
    assert low < real / counted < 1.05, (shape, counted, real, stats)


def _agent_body(a: int, r: int, size: int) -> bytes:
    text = (f"agent {a} " + "".join(f"rule {a}-{j}. " for j in range(size // 9)))[:size]
    return json.dumps(
        {
            "model": "m",
            "user": f"s{a}-{r}",
            "messages": [{"role": "system", "content": text}, {"role": "user", "content": f"task {r}"}],
        }
    ).encode()


def test_agents_with_huge_system_prompts_are_bounded_in_real_bytes():
    """24 agents x 600 kB system prompts, two requests each (so each becomes an agent), with an
    8 MiB agent budget and a 4 MiB index budget. Before: no byte bound on agents (anchor hashes,
    block tokens, payload) and agent nodes pinned in the index past its budget (300 x 3.5 MB
    prompts: 2,102 MB). Sessions are given a small budget so that what is measured is agents."""
    cfg = PolicyConfig(
        agents_max_bytes=8 << 20,
        prefix_index_max_bytes=4 << 20,
        session_max_bytes=1 << 20,
        residency_max_entries=4_000,  # (~260 B each: ~1 MB)
    )
    bodies = [(a, r, _agent_body(a, r, 600_000)) for a in range(24) for r in range(2)]

    def build() -> ScoutPolicy:
        p = ScoutPolicy(cfg)
        for a, r, body in bodies:
            v = view_from_openai("/v1/chat/completions", body, {}, block_chars=64, chars_per_token=4.0)
            assert v is not None
            p.observe_request(v, float(2 * a + r))
        return p

    stats, real = retained(build)
    assert isinstance(stats, dict)
    assert stats["agent_bytes"] <= cfg.agents_max_bytes and stats["index"]["bytes"] <= cfg.prefix_index_max_bytes
    assert stats["dropped"] > 0 and stats["agents"] >= 4  # evicted for bytes, the budget still used
    # everything the policy retains: agents + index + sessions (+ residency shadow, transitions)
    bound = cfg.agents_max_bytes + cfg.prefix_index_max_bytes + cfg.session_max_bytes + 260 * 4_000
    assert real < 1.15 * bound + (4 << 20), (real, bound, stats)  # before: ~6 MB an agent, 140+ MB here


def test_residency_shadow_at_its_default_bound_is_about_250_bytes_an_entry():
    """The shadow with an unknown engine capacity fills `residency_max_entries` and then churns
    (every new prompt evicts the oldest blocks, re-sent prompts leave stale queue entries). Issue
    22: at the old default (200k) it held 64-84 MB, not the ~52 MB documented: both dicts churned at
    2^20 slots (21 MB each) and the touch queue kept an int object per stamp and every evicted hash
    until compaction. Now: stamps in a C array, passed slots cleared, 160k entries (dicts at 2^19)."""
    cfg = PolicyConfig()
    rng = random.Random(7)

    def build() -> ResidencyShadow:
        sh = ResidencyShadow(0, stride=1, max_entries=cfg.residency_max_entries)
        for k in range(int(2.5 * cfg.residency_max_entries) // 2000):
            hashes = tuple(rng.getrandbits(64) for _ in range(2000))
            for r in range(2):  # each prompt sent twice: half the queue goes stale
                sh.on_forward(view_from_blocks("", hashes, 16, session_id=f"s{k}-{r}"), float(k))
        return sh

    stats, real = retained(build)
    assert isinstance(stats, dict) and stats["entries"] == cfg.residency_max_entries
    print(f"\nresidency shadow: {real / 1e6:.1f} MB for {stats['entries']} entries, queue {stats['queue']}")
    assert real < 260 * cfg.residency_max_entries, (real, stats)  # before: 330-420 B an entry at 200k
