"""The per-candidate filters (plan_filters.py), each on its own: the skip reason it returns when
its rule holds, None otherwise; and the R gate and the deferral, which sources ask."""

from __future__ import annotations

import random

from proxy.core import ResidencyShadow, view_from_blocks
from proxy.core.action_payload import ActionPayload
from proxy.core.actions import REASON_SWEEP, REASON_TRANSITION
from proxy.core.candidates import Candidate
from proxy.core.config import PolicyConfig
from proxy.core.plan_filters import Cooldown, Duplicate, HostTier, Look, Resident, WarmAllowed

from .conftest import quiet_config
from .test_decisions import rows
from .test_planner import PIPE, fresh, learn

HASHES = (1, 2, 3, 4)


def cand(**kw: object) -> Candidate:
    base: dict[str, object] = {
        "score": 1.0, "reason": REASON_TRANSITION, "tenant": "", "anchor_id": "a", "hashes": HASHES,
        "block_tokens": (16,) * 4, "payload": ActionPayload({}), "prob": 0.9, "lead": None,
    }  # fmt: skip
    base.update(kw)
    return Candidate(**base)  # type: ignore[arg-type]


def look(cfg: PolicyConfig | None = None, cap: int = 16 * 100, busy: bool = False, **shadow: bool) -> Look:
    res = ResidencyShadow(cap, stride=1)
    if shadow.get("cached"):
        res.on_forward(view_from_blocks("", list(HASHES), 16), 0.0)
    host = ResidencyShadow(cap, stride=1) if shadow.get("host") else None
    if host is not None:
        host.on_forward(view_from_blocks("", list(HASHES), 16), 0.0)
    return Look(cfg or PolicyConfig(), res, host, 10.0, busy, {})


# the filter pieces, each a fresh instance (the resident piece keeps its memo)
duplicate, cooldown, host_tier, warm_allowed = (
    Duplicate().first,
    Cooldown().first,
    HostTier().residency,
    WarmAllowed().warm,
)


def test_duplicate_and_cooldown_and_the_resident_memo():
    c, x = cand(), look()
    res = Resident()
    x.first(c)
    assert duplicate(c, x) is None and cooldown(c, x) is None and res.first(c, x) is None
    x.seen.add("a")
    assert duplicate(c, x) == "duplicate"
    x.last_acted["a"] = 9.9  # within cooldown_s (0.5) of now = 10
    assert cooldown(c, x) == "cooldown"
    res.memo["a"] = (x.res.epoch, x.res.inserted_tokens + 1)
    assert res.first(c, x) == "resident"


def test_resident_skips_a_safe_anchor_and_writes_the_memo():
    c, x = cand(), look(cached=True)
    x.first(c)
    x.judge(c)
    assert x.full and not x.near and x.missing == 0
    res = Resident()
    assert res.residency(c, x) == "resident" and "a" in res.memo
    sweep = cand(reason=REASON_SWEEP)
    x = look(PolicyConfig(retain_enabled=True), cached=True)
    x.first(sweep)
    x.judge(sweep)
    assert x.retainable and res.residency(sweep, x) is None  # the pricer retains it


def test_host_tier_times_the_load_back():
    x = look(PolicyConfig(reload_tokens_per_s=1e6, host_tier_tokens=16 * 100), host=True)
    c = cand(lead=100.0)  # far: load it later
    x.first(c)
    x.judge(c)
    assert x.h_full and host_tier(c, x) == "host_not_now"
    c = cand(lead=None)  # no predicted time: at once
    assert host_tier(c, x) is None


def test_warm_filters():
    x = look()
    c = cand()
    x.first(c)
    x.judge(c)
    assert x.missing == 64 and warm_allowed(c, x) is None
    assert warm_allowed(cand(reason=REASON_SWEEP), x) == "warm_not_allowed"
    assert warm_allowed(cand(warm_ok=False), x) == "warm_not_allowed"
    assert warm_allowed(c, look(busy=True)) == "warm_busy"


def _shut_gate(**kw: object) -> tuple[int, list[str]]:
    from proxy.core import ScoutPolicy

    from .conftest import Workload

    w = Workload(ScoutPolicy(quiet_config(residency_capacity_tokens=16 * 60, r_min=0.3, top_k=6, tau=0.0, **kw)))
    rng = random.Random(0)
    now = fresh(w, learn(w, [rng.randrange(6) for _ in range(150)], sessions=1))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    before = w.policy.planner.skipped["gate_closed"]
    acts = w.policy.plan(now + 1.1)
    return w.policy.planner.skipped["gate_closed"] - before, [a.reason for a in acts]


def test_the_r_gate_and_switching_it_off():
    assert _shut_gate() == (1, [])
    n, reasons = _shut_gate(disabled_pieces=("gate",))
    assert n == 0 and REASON_TRANSITION in reasons


def test_switching_a_filter_off_lets_its_candidates_through(workload):
    w = workload(residency_capacity_tokens=16 * 60, cooldown_s=100.0)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    w.step(0, "live", now + 1)
    assert len(w.policy.plan(now + 1.2)) == 1
    w.step(0, "live2", now + 1.5)
    assert w.policy.plan(now + 1.6) == [] and rows(w, "cooldown")
    w2 = workload(residency_capacity_tokens=16 * 60, cooldown_s=100.0, disabled_pieces=("cooldown",))
    now = fresh(w2, learn(w2, PIPE))
    w2.junk(16 * 80, now)
    w2.step(0, "live", now + 1)
    (a,) = w2.policy.plan(now + 1.2)
    w2.policy.record_action_result(a, True, now + 1.25)
    w2.junk(16 * 80, now + 1.3)
    w2.step(0, "live2", now + 1.5)
    assert len(w2.policy.plan(now + 1.6)) == 1 and not rows(w2, "cooldown")


def _running_request(workload, **kw: object) -> tuple[int, int]:
    """A request still running: with plan_trigger auto and a pause long enough for a warm later,
    its successors are deferred to its response end."""
    w = workload(residency_capacity_tokens=16 * 60, **kw)
    now = fresh(w, learn(w, PIPE))
    w.junk(16 * 80, now)
    before = w.policy.planner.skipped["deferred"]
    w.policy.observe_request(w.view(0, "live"), now + 1)
    w.policy.plan(now + 1.05)
    return w.policy.planner.skipped["deferred"] - before, len(rows(w, "acted"))


def test_the_deferral_and_switching_it_off(workload):
    assert _running_request(workload) == (1, 0)
    deferred, acted = _running_request(workload, disabled_pieces=("deferred",))
    assert deferred == 0 and acted == 1  # planned while the request runs


def test_duplicate_is_the_one_guard_against_twin_actions_in_a_tick(workload):
    """Two sessions that predict the same successor put its anchor in one tick twice. The cooldown
    cannot stop the second (the picker writes last_acted after the tick's filtering) and nothing
    else in the planner does: without ``duplicate`` both are emitted, the bucket is charged twice
    and the twins share one in-flight key (anchor, created), so one of them is not counted against
    max_concurrent. Why the piece stays although the grid ablation found it cheap (docs/policy.md)."""

    def tick(off: tuple[str, ...]) -> tuple[list[tuple[str, str]], int, int]:
        w = workload(residency_capacity_tokens=16 * 60, disabled_pieces=off)
        now = fresh(w, learn(w, PIPE))
        w.junk(16 * 80, now)
        w.step(0, "live", now + 1)
        w.step(0, "live2", now + 1.05)
        acts = w.policy.plan(now + 1.2)
        p = w.policy.planner
        return [(a.kind, a.anchor_id) for a in acts], len(p.inflight), p.skipped["duplicate"]

    acts, inflight, skipped = tick(())
    assert len(acts) == 1 and inflight == 1 and skipped == 1
    twins, inflight, skipped = tick(("duplicate",))
    assert twins == acts * 2 and inflight == 1 and skipped == 0
