"""The prefix index on its own: memory bound, eviction of one-off tails, lookups, snapshot ids."""

from __future__ import annotations

import json

from proxy.core import PolicyConfig, ScoutPolicy, view_from_blocks
from proxy.core.prefix_index import PrefixIndex


def test_memory_stays_under_the_cap_and_one_offs_are_evicted_first():
    idx = PrefixIndex(max_bytes=200_000)
    agent = [1, 2, 3, 4]
    for k in range(3):  # a recurring prefix: an agent
        _node, promoted, *_ = idx.observe("", tuple(agent + [100 + k]), None, 0.0)
        if promoted is not None:
            idx.attach(promoted, "agent-A")  # the registry names promoted nodes
    promoted = [n for n in _nodes(idx) if n.agent is not None]
    assert len(promoted) == 1 and promoted[0].depth == 4
    for k in range(5000):  # one-off prompts, 40 blocks each
        idx.observe("", tuple(range(10_000 + 40 * k, 10_040 + 40 * k)), None, float(k))
        assert idx.bytes <= idx.max_bytes
    assert idx.evicted > 4000
    assert any(n.agent is not None and n.depth == 4 for n in _nodes(idx))  # agents are kept
    assert idx.lookup("", tuple(agent + [999])) == "agent-A"


def _nodes(idx):
    stack = list(idx.roots.values())
    while stack:
        n = stack.pop()
        yield n
        stack.extend((n.children or {}).values())


def test_fan_out_of_one_context_is_one_source_not_an_agent():
    idx = PrefixIndex()
    ctx = (7, 8, 9)
    idx.observe("", ctx, None, 0.0)  # a request; then its continuations fork
    for k in range(5):
        assert idx.observe("", ctx + (50 + k,), None, 1.0)[1] is None
    assert not any(n.agent for n in _nodes(idx))


def test_tenants_never_share_nodes():
    idx = PrefixIndex()
    for k in range(3):
        promoted = idx.observe("a", (1, 2, 3, 10 + k), None, 0.0)[1]
        if promoted is not None:
            idx.attach(promoted, "agent-A")
    assert idx.lookup("b", (1, 2, 3, 99)) is None and idx.lookup("a", (1, 2, 3, 99)) == "agent-A"


def test_snapshot_restores_index_agents_with_their_ids():
    p = ScoutPolicy()
    for k in range(4):
        p.observe_request(view_from_blocks("", [1, 2, 3, 50 + k], 16, session_id=f"s{k}"), float(k))
        p.observe_request(view_from_blocks("", [7, 8, 60 + k], 16, session_id=f"s{k}"), float(k) + 0.5)
    ids = {len(a.anchor_hashes): a.agent_id for a in p.agents.by_id.values()}
    assert set(ids) == {3, 2}
    snap = json.loads(json.dumps(p.snapshot()))
    q = ScoutPolicy(PolicyConfig())
    q.restore(snap)
    learned = q.stats().transitions
    o1 = q.observe_request(view_from_blocks("", [1, 2, 3, 77], 16, session_id="n1"), 10.0)
    o2 = q.observe_request(view_from_blocks("", [7, 8, 78], 16, session_id="n1"), 11.0)
    assert (o1.agent_id, o2.agent_id) == (ids[3], ids[2])  # same ids, at first sight after restart
    assert q.agents.by_id[ids[3]].anchor_hashes == (1, 2, 3)
    assert q.stats().transitions == learned + 1 and len(q.agents) == 2
