"""Issue 13 in the core: sessions bounded in bytes, per-tick clears under a queued engine, and a
strict, all-or-nothing, salt-free state file."""

from __future__ import annotations

import copy
import dataclasses
import json
import time

import pytest

from proxy.core import EngineLoad, PolicyConfig, ResponseOutcome, ScoutPolicy, view_from_blocks
from proxy.core import snapshot as snap_mod
from proxy.core.sessions import HASH_BYTES, TOKEN_BYTES

from .conftest import Workload
from .test_snapshot_policy import learned_policy


class Blob:
    """A compact payload declaring its size, like runtime/payload.BodyPayload."""

    def __init__(self, n: int) -> None:
        self.nbytes = n


def big_view(sid: str, blocks: int, payload_bytes: int, tenant: str = ""):
    ids = [hash((sid, i)) & 0xFFFFFFFFFFFF for i in range(blocks)]
    return view_from_blocks(
        tenant,
        [1, 2, 3, *ids],
        16,
        anchor_blocks=3,
        session_id=sid,
        anchor_payload={"a": 1},
        context_payload=Blob(payload_bytes),
    )


def test_sessions_stay_within_their_byte_budget_oldest_dropped_first():
    budget = 10 * 1024 * 1024
    p = ScoutPolicy(PolicyConfig(session_max_bytes=budget))
    for k in range(100):  # 100 sessions x ~1.3 MB each
        p.observe_request(big_view(f"s{k}", 4096, 1_000_000), float(k))
    tracker = p.sessions
    assert tracker.bytes <= budget
    assert tracker.bytes == sum(s.nbytes for s in tracker.sessions.values())
    kept = list(tracker.sessions)
    assert kept[-1] == ("", "s99") and ("", "s0") not in tracker.sessions  # newest kept, oldest gone
    assert tracker.dropped_for_bytes == 100 - len(kept)
    per = 4099 * (HASH_BYTES + TOKEN_BYTES) + 1_000_000
    assert len(kept) == budget // per


def test_a_session_larger_than_the_whole_budget_keeps_only_its_counters():
    p = ScoutPolicy(PolicyConfig(session_max_bytes=1_000_000))
    p.observe_request(big_view("small", 10, 1000), 0.0)
    p.observe_request(big_view("huge", 100, 5_000_000), 1.0)
    huge = p.sessions.sessions[("", "huge")]
    assert huge.context_payload is None and huge.hashes == () and huge.requests == 1
    assert ("", "small") in p.sessions.sessions and p.sessions.bytes <= 1_000_000


def test_dropped_sessions_release_their_payload_even_while_a_response_is_pending():
    p = ScoutPolicy(PolicyConfig(session_max_bytes=3_000_000))
    first = p.observe_request(big_view("a", 10, 1_000_000), 0.0)
    old = p.sessions.sessions[("", "a")]
    for k in range(5):
        p.observe_request(big_view(f"b{k}", 10, 1_000_000), 1.0 + k)
    assert ("", "a") not in p.sessions.sessions and old.context_payload is None and old.hashes == ()
    p.observe_response(first.request_id, ResponseOutcome("stop"), 9.0)
    assert p.sessions.bytes == sum(s.nbytes for s in p.sessions.sessions.values())


def test_parked_fanout_parents_are_cleared_every_tick_even_when_the_engine_is_queued():
    p = ScoutPolicy(PolicyConfig(max_sessions=64))
    queued = EngineLoad(inflight=0, waiting=10)
    for k in range(2000):
        v = view_from_blocks(
            "",
            [1, 2, 3, 100 + k, 200 + k],
            16,
            anchor_blocks=3,
            session_id=f"f{k}",
            anchor_payload={"a": 1},
            context_payload={"c": k},
            n=2,
        )
        p.observe_request(v, float(k))
        if k % 10 == 0:
            assert p.plan(float(k), queued) == []
    assert len(p.planner.fanout) <= 10
    assert len(p.planner.dirty) <= 2 * 64 + 10


def test_fanout_parking_has_a_byte_budget():
    p = ScoutPolicy(PolicyConfig(fanout_max_bytes=2_500_000))
    for k in range(5):
        p.observe_request(dataclasses.replace(big_view(f"n{k}", 10, 1_000_000), n=2), float(k))
    assert len(p.planner.fanout) == 2 and p.fanout_dropped == 3


# --- state file ----------------------------------------------------------------------------------
def test_state_of_256_agents_with_dense_transitions_round_trips():
    w, _ = learned_policy(n_agents=256, steps=6000, seed=1)
    doc = w.policy.snapshot()
    size = len(json.dumps(doc, separators=(",", ":")))
    assert w.policy.stats().agents == 256 and size <= PolicyConfig().snapshot_max_bytes
    q = ScoutPolicy()
    q.restore(json.loads(json.dumps(doc)))
    assert q.stats().agents == 256


def test_dump_keeps_the_most_valuable_agents_that_fit():
    w, _ = learned_policy(n_agents=40, steps=2000, seed=2)
    small = ScoutPolicy(PolicyConfig(snapshot_max_bytes=6000))
    small.agents = w.policy.agents
    doc = small.snapshot()
    assert len(json.dumps(doc, separators=(",", ":"))) <= 6000
    kept = doc["tenants"][""]["agents"]
    assert 0 < len(kept) < 40
    uses = sorted((a.uses for a in w.policy.agents.by_id.values()), reverse=True)
    assert min(a[4] for a in kept) >= uses[len(kept) + 8]  # roughly the top ones
    ScoutPolicy(PolicyConfig(snapshot_max_bytes=6000)).restore(doc)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda t: t["agents"][0].__setitem__(2, 30_000_000),  # slot far beyond max_agents
        lambda t: t["agents"][0].__setitem__(2, -1),
        lambda t: t["agents"][1].__setitem__(1, "zz"),  # bad key
        lambda t: t["agents"][1].__setitem__(4, float("nan")),
        lambda t: t["agents"][1].__setitem__(6, [1.0] * 10_000),  # gap list longer than gap_samples
        lambda t: t["agents"].append(list(t["agents"][0])),  # duplicate
        lambda t: t["transitions"].append([0, 999, 1.0]),  # unknown slot
        lambda t: t["transitions"][0].__setitem__(2, 1e300),
        lambda t: t.__setitem__("steps", -5),
        lambda t: t["agents"][2].__setitem__(3, "many"),
    ],
)
def test_any_bad_entry_refuses_the_whole_file_and_changes_nothing(mutate):
    w, _ = learned_policy(steps=200)
    doc = copy.deepcopy(w.policy.snapshot())
    mutate(doc["tenants"][""])
    q = ScoutPolicy()
    good = w.policy.snapshot()
    q.restore(copy.deepcopy(good))
    before = q.snapshot()
    t0 = time.monotonic()
    with pytest.raises(ValueError):
        q.restore(doc)
    assert time.monotonic() - t0 < 1.0
    assert q.snapshot() == before  # all or nothing


def test_salted_tenants_are_never_written_raw_and_come_back_with_their_traffic():
    salt = "tenant-secret-salt"
    w = Workload(ScoutPolicy(), tenant=salt)
    for k in range(60):
        w.step(k % 3, f"s{k // 6}", float(k))
    doc = w.policy.snapshot()
    text = json.dumps(doc)
    assert salt not in text and f"salt:{len(salt)}c#" in text
    q = ScoutPolicy()
    q.restore(json.loads(text))
    assert q.stats().agents == 0  # dormant until the tenant returns
    assert json.loads(json.dumps(q.snapshot())) == doc  # and still saved meanwhile
    w2 = Workload(q, tenant=salt)
    w2.step(0, "back", 100.0)
    assert q.stats().agents == 3 and q.agents.tenant(salt).learner.steps >= 50


def test_older_files_with_raw_salts_are_still_read():
    w = Workload(ScoutPolicy(), tenant="t1")
    for k in range(30):
        w.step(k % 2, "s", float(k))
    doc = w.policy.snapshot()
    ((key, t),) = doc["tenants"].items()
    assert key == snap_mod.tenant_key("t1")
    v1 = {**t, "agents": [row[:8] for row in t["agents"]]}  # v1: no anchor length
    for old in (
        {"kind": doc["kind"], "version": 2, "tenants": {"t1": t}},
        {"kind": doc["kind"], "version": 1, "tenants": {"t1": v1}},
    ):
        q = ScoutPolicy()
        q.restore(old)
        Workload(q, tenant="t1").step(0, "x", 50.0)
        assert q.stats().agents == 2
