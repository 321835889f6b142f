"""Policies on small streams: the baselines do what they claim, and scout-proxy's outcome on the
topology presets is a real result of the live planner on the simulated engine (beats LRU on
selector and pipeline where the cache has room, does no harm where it has none; the R-gate keeps it
within 0.5 pp of LRU on random)."""

import pytest

from proxy.cachemodel.cost_model import CostModel
from proxy.replay.runner import POLICIES, ReplaySettings, make_policy, replay, resolve_capacity, run_policy
from proxy.replay.traces import ReplayRequest
from proxy.replay.workloads import generate, preset

COST = CostModel()


def _hit_rate(name, reqs, cap, **settings):
    rec = run_policy(make_policy(name, ReplaySettings(**settings)), reqs, cap, COST)
    return rec.hit_tokens.sum() / rec.prompt_tokens.sum(), rec


def _req(t, hashes, **kw):
    return ReplayRequest(t=t, tenant="", block_hashes=tuple(hashes), block_tokens=(16,) * len(hashes), **kw)


@pytest.fixture(scope="module")
def topo():
    return {name: generate(preset(name)) for name in ("selector", "pipeline", "random")}


def _outcome(name, reqs, cap):
    rec = run_policy(make_policy(name, ReplaySettings()), reqs, cap, COST)
    work = rec.prefill_s_total() + sum(s.cost_s for s in rec.signals.values())  # engine s, warmups incl.
    return rec.hit_tokens.sum() / rec.prompt_tokens.sum(), work, rec.latencies()[0].mean(), rec


@pytest.mark.parametrize("name", ["selector", "pipeline"])
def test_scout_proxy_beats_lru_on_predictable_topologies(topo, name):
    """Where the cache has room for more than the running requests (6% of the stream's blocks; on
    the engine, whose admission reserves each request's whole KV, 3% still queues seconds), the
    actions pay: higher hit rate, mean TTFT no worse than LRU's by more than 0.5%, engine work (its
    own warmups included) within 1%. (The TTFT bound was strict until the shadow charged prompts'
    tails, issue 25: selector then reads +0.15% with +0.6 pp hit. Since a warm's price charges the
    requests decoding, fewer touches run: selector +0.27 pp hit, TTFT +0.03%, pipeline +0.24 pp,
    TTFT -0.4%; the hit margin was 0.3 pp before.)"""
    reqs = topo[name]
    cap = resolve_capacity(0.06, reqs)
    lru_hit, lru_work, lru_ttft, _ = _outcome("lru", reqs, cap)
    hit, work, ttft, rec = _outcome("scout-proxy", reqs, cap)
    assert hit > lru_hit + 0.002
    assert work <= 1.01 * lru_work
    assert ttft < 1.005 * lru_ttft
    assert sum(rec.actions_by_kind.values()) > 0


@pytest.mark.parametrize("name", ["selector", "pipeline"])
def test_scout_proxy_does_no_harm_when_the_running_set_fills_the_cache(topo, name):
    """At 1.5% the requests in flight alone often fill the cache: the proxy mostly observes, and
    the yield ledger throttles a signal that loses; what it does must not cost the traffic."""
    reqs = topo[name]
    cap = resolve_capacity(0.015, reqs)
    lru_hit, lru_work, lru_ttft, _ = _outcome("lru", reqs, cap)
    hit, work, ttft, _ = _outcome("scout-proxy", reqs, cap)
    assert hit >= lru_hit
    assert work <= 1.01 * lru_work
    assert ttft <= 1.01 * lru_ttft


@pytest.mark.parametrize("share", [0.015, 0.03])
def test_r_gate_keeps_scout_proxy_within_half_a_point_of_lru_on_random(topo, share):
    reqs = topo["random"]
    cap = resolve_capacity(share, reqs)
    lru, _ = _hit_rate("lru", reqs, cap)
    pol = make_policy("scout-proxy", ReplaySettings())
    rec = run_policy(pol, reqs, cap, COST)
    scout = rec.hit_tokens.sum() / rec.prompt_tokens.sum()
    assert abs(scout - lru) <= 0.005
    assert pol.sp.stats().predictability < pol.sp.config.r_min  # it is the gate, not luck


def test_scout_proxy_runs_the_live_planner_and_its_knobs_matter(topo):
    reqs = topo["selector"]
    cap = resolve_capacity(0.03, reqs)
    pol = make_policy("scout-proxy", ReplaySettings())
    run_policy(pol, reqs, cap, COST)
    from proxy.core.policy import ScoutPolicy

    assert isinstance(pol.sp, ScoutPolicy)
    st = pol.sp.stats()
    assert st.agents == 6 and st.top1_accuracy > 0.6 and st.actions_emitted
    off, _ = _hit_rate("scout-proxy", reqs, cap, scout_overrides={"r_min": 1.01})
    lru, _ = _hit_rate("lru", reqs, cap)
    assert off == pytest.approx(lru)  # gate shut: exactly LRU


def test_scout_engine_and_priority_proxy_beat_lru_on_selector(topo):
    reqs = topo["selector"]
    cap = resolve_capacity(0.06, reqs)
    lru, _ = _hit_rate("lru", reqs, cap)
    assert _hit_rate("scout-engine", reqs, cap)[0] > lru + 0.005
    assert _hit_rate("scout-proxy-priority", reqs, cap)[0] > lru + 0.005


def test_history_learns_which_category_is_reused():
    # category "sys" repeats the same 4 blocks; "one" requests are one-off 4-block prompts
    reqs, t = [], 0.0
    for i in range(200):
        t += 1.0
        if i % 3 == 0:
            reqs.append(_req(t, [1, 2, 3, 4], category="sys"))
        else:
            reqs.append(_req(t, [1000 + 10 * i + j for j in range(4)], category="one"))
    lru, _ = _hit_rate("lru", reqs, 8)
    hist, _ = _hit_rate("history", reqs, 8)
    assert lru == 0.0  # two one-offs between reuses flush an 8-block LRU
    assert hist > 0.2  # of at most 0.25: the engine recomputes a fully cached prompt's last block


def test_ttl_pins_a_tool_calling_session_until_it_resumes():
    reqs = [_req(0.0, [1, 2, 3], session_id="s", finish_reason="tool_calls", output_tokens=1)]
    reqs += [_req(1.0 + 0.1 * i, [100 + i, 200 + i]) for i in range(20)]  # flood
    reqs.append(_req(4.0, [1, 2, 3, 4], session_id="s"))
    lru, _ = _hit_rate("lru", reqs, 6)
    ttl, rec = _hit_rate("ttl", reqs, 6, ttl_s=10.0)
    short, _ = _hit_rate("ttl", reqs, 6, ttl_s=0.5)
    assert rec.hit_blocks[-1] == 3 and ttl > lru
    assert short == pytest.approx(lru)  # the pin expired before the resume
    assert rec.signal_summary(0.0)["tool_resume"]["conversion"] == 1.0


def test_replay_is_deterministic_and_always_runs_the_bounds(topo):
    reqs = topo["pipeline"][:300]
    a = replay(reqs, [200], ["scout-proxy"])
    b = replay(reqs, [200], ["scout-proxy"])
    assert list(a["capacities"][0]["policies"]) == ["lru", "scout-proxy", "belady"]
    ha = {n: s["hit_rate"] for n, s in a["capacities"][0]["policies"].items()}
    hb = {n: s["hit_rate"] for n, s in b["capacities"][0]["policies"].items()}
    assert ha == hb
    assert ha["lru"] <= ha["belady"]
    with pytest.raises(ValueError):
        replay(reqs, [200], ["nope"])
    assert set(POLICIES) >= {"lru", "history", "ttl", "scout-engine", "scout-proxy", "scout-proxy-priority", "belady"}


def test_capacity_accepts_shares_percentages_and_blocks(topo):
    reqs = [_req(0.0, [1, 2]), _req(1.0, [3, 4])]
    assert resolve_capacity("50%", reqs) == 2
    assert resolve_capacity(0.5, reqs) == 2
    assert resolve_capacity("300", reqs) == 300
