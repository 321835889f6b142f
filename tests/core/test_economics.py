"""core/economics: what an action is worth, from the engine's measured quantities."""

from __future__ import annotations

from proxy.core.economics import NOTHING, TOUCH, WAIT, WARM, Market, Prospect, RunningSet, assess, survival

CAP = 10_000.0


def market(**kw) -> Market:
    base: dict = {
        "capacity_tokens": CAP,
        "insert_rate": 1_000.0,
        "zone_tokens": CAP / 4,
        "tail_reuse": 0.0,
        "prefill_tokens_per_s": 5_000.0,
        "request_rate": 1.0,
    }
    base.update(kw)
    return Market(**base)


def test_survival_follows_turnover():
    m = market()
    assert survival(CAP, 1.0, m) > survival(CAP, 5.0, m) > survival(CAP, 20.0, m)
    assert abs(survival(CAP, 10.0, m) - 2.718281828**-1) < 1e-6  # one lifetime
    assert survival(CAP / 8, 1.0, m) < survival(CAP, 1.0, m)  # near the tail: less left
    unknown = market(insert_rate=None)
    assert survival(CAP, 3.0, unknown) == 1.0 and survival(CAP / 8, 3.0, unknown) == 0.0


def test_touch_a_resident_prefix_near_eviction_pays_and_a_safe_one_needs_nothing():
    m = market()
    v = assess(Prospect(2_000, 0, True, 0.9, 2.0), m)
    assert v.kind == TOUCH and v.net > 0 and v.cost < 50
    assert assess(Prospect(2_000, 0, False, 0.9, 2.0), m).kind == NOTHING


def test_warm_only_in_slack_and_unknown_time_only_when_quiet():
    p = Prospect(2_000, 2_000, False, 0.9, 1.0)
    assert assess(p, market()).kind == WARM and assess(p, market()).net > 0
    assert assess(p, market(waiting=1)).kind == WAIT  # a client queued: never in front
    unknown = Prospect(2_000, 2_000, False, 0.9, None)
    assert assess(unknown, market(prefilling=1)).kind == WAIT  # traffic still inserting
    assert assess(unknown, market()).kind == WARM
    soon = Prospect(2_000, 2_000, False, 0.9, None, imminent=True)
    assert assess(soon, market(prefilling=1)).kind == WARM  # follows the running request


def test_warm_declined_when_it_would_be_evicted_before_the_demand_or_the_engine_is_busy():
    far = assess(Prospect(2_000, 2_000, False, 0.9, 60.0), market(tail_reuse=0.2))
    assert far.net < 0  # e^-6 of it survives; pollution
    busy = assess(Prospect(2_000, 2_000, False, 0.5, 1.0), market(utilisation=1.0))
    assert busy.net < 0  # recompute on a busy engine: no gain
    cheap = assess(Prospect(2_000, 2_000, False, 0.5, 1.0), market(utilisation=1.0, reload_price=0.1))
    assert cheap.net > 0  # a cheap tier makes it pay


def test_pollution_and_queueing_count_against_a_warm():
    p = Prospect(4_000, 4_000, False, 0.9, 1.0)
    clean = assess(p, market())
    dirty = assess(p, market(tail_reuse=0.5))
    crowded = assess(p, market(request_rate=50.0))
    assert dirty.cost > clean.cost and crowded.cost > clean.cost


def test_a_warm_is_charged_for_every_client_request_it_slows_while_they_decode():
    """A warm's prefill shares the engine's step with the running decodes (vLLM schedules both in
    one step), so each generating request waits its prefill time, as a queued one does: a warm
    that pays on an idle engine waits while clients decode, one that would not pay anyway is
    declined with the decodes in its cost, and a touch stays cheap."""
    far = Prospect(2_000, 2_000, False, 0.9, 1.0)
    idle, decoding = assess(far, market(tail_reuse=0.1)), assess(far, market(tail_reuse=0.1, decoding=2))
    assert idle.kind == WARM and idle.net > 0
    assert decoding.kind == WAIT  # it pays once they are done: asked again at the next tick
    assert decoding.cost > decoding.saving > 0  # with its figures: the planner records wait_for_decodes
    assert assess(far, market(waiting=1)).cost == 0  # a queue's WAIT is not priced: wait_for_slack
    crowded = market(tail_reuse=0.1, decoding=2, waiting=0, request_rate=20.0)
    v = assess(far, crowded)
    assert v.kind == WARM and v.net < 0  # would not pay even with nobody decoding: declined
    assert abs((v.cost - assess(far, market(tail_reuse=0.1, request_rate=20.0)).cost) - 2 * 2_000) < 1e-6
    touch = assess(Prospect(2_000, 0, True, 0.9, 2.0), market(decoding=2))
    assert touch.kind == TOUCH and touch.net > 0


def test_observe_only_when_the_running_set_overflows_the_cache():
    m = market(running_tokens=CAP)
    assert m.overflowing
    assert assess(Prospect(2_000, 0, True, 1.0, 1.0), m).kind == NOTHING


def test_running_set_counts_shared_blocks_once():
    r = RunningSet()
    r.add([1, 2, 3], [16, 16, 16])
    r.add([1, 2, 4], [16, 16, 16])
    assert r.tokens == 64
    r.remove([1, 2, 3])
    assert r.tokens == 48
    r.remove([1, 2, 4])
    r.remove([9])
    assert r.tokens == 0


def test_quiet_needs_a_pause_in_arrivals():
    """An agent's first tool resume (no gap sample): warmed only once the traffic has paused for
    twice its mean inter-arrival, not between two requests of a burst (item 4)."""
    unknown = Prospect(2_000, 2_000, False, 0.9, None)
    assert assess(unknown, market(request_rate=3.0, idle_s=0.2)).kind == WAIT
    assert assess(unknown, market(request_rate=3.0, idle_s=0.7)).kind == WARM


def test_external_load_means_the_engine_is_never_quiet():
    p = Prospect(2_000, 2_000, False, 0.9, None)  # demand time unknown: waits for quiet
    quiet = market(idle_s=100.0)
    assert quiet.quiet and assess(p, quiet).kind == WARM
    shared = market(idle_s=100.0, external=2)
    assert not shared.quiet and assess(p, shared).kind == WAIT
