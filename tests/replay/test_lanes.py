"""The priority lanes in the replay (issue 24): the slack lane (`scout-proxy-lane`), the session
lane's closed-loop driver (`lanes.py`) and the grid's `--lane` option (`grid_lanes.py`)."""

import json

import pytest

from proxy.cachemodel.cost_model import CostModel
from proxy.engines.base import LANE_LOWEST, lane_engine_priority
from proxy.replay.engine_run import run_on_engine
from proxy.replay.grid import GridPreset, GridSpec, lane_names, run_grid
from proxy.replay.lanes import SessionLaneDriver, session_links, session_metrics
from proxy.replay.policies import LruPolicy
from proxy.replay.runner import ReplaySettings, make_policy, replay
from proxy.replay.traces import ReplayRequest
from proxy.replay.workloads import generate, preset
from proxy.runtime.session_lane import SessionLane

BS = 16


def _req(t, sid, hashes, out=1):
    return ReplayRequest(
        t=t, tenant="", block_hashes=tuple(hashes), block_tokens=(BS,) * len(hashes), output_tokens=out, session_id=sid
    )


def _contended():
    """s1 starts a long prompt at 0; s2..s6 start long prompts 0.2 s apart; s1's second call follows
    its first answer at once (closed loop) and extends its prompt by one block."""
    n = 1250  # 20k tokens: ~1.3 s of prefill each
    reqs = [_req(0.0, "s1", [("s1", j) for j in range(n)])]
    for k in range(2, 7):
        reqs.append(_req(0.2 * (k - 1), f"s{k}", [(f"s{k}", j) for j in range(n)]))
    reqs.append(_req(9.0, "s1", [("s1", j) for j in range(n + 1)]))
    dep = [-1] * len(reqs)
    dep[-1] = 0
    return reqs, (dep, [0.0] * len(reqs))


def _run(reqs, links, mode, policy=None):
    pol = policy or LruPolicy()
    rec = run_on_engine(pol, reqs, 20000, CostModel(), session_lane={"mode": mode, "links": links, "ageing_s": 30.0})
    return pol, rec


def test_closed_loop_follows_the_answer_and_continue_puts_a_started_session_first():
    reqs, links = _contended()
    pol, fcfs = _run(reqs, links, "fcfs")
    assert pol.driver.engine.config.scheduling_policy == "fcfs"
    first_end = fcfs.arrival[0] + fcfs.turn[0]
    assert fcfs.arrival[-1] == pytest.approx(first_end)  # arrives at its predecessor's answer + pause 0
    pol, cont = _run(reqs, links, "continue")
    assert pol.driver.engine.config.scheduling_policy == "priority"
    # FCFS: s1's second call queues behind the four sessions that started after s1; `continue`: ahead
    assert fcfs.ttft[-1] > 2.0
    assert cont.ttft[-1] < 0.5 * fcfs.ttft[-1]
    # las: s1 has been served 20k tokens: it lets the newer sessions go first
    _, las = _run(reqs, links, "las")
    assert las.ttft[-1] >= fcfs.ttft[-1] - 1e-9
    m = session_metrics(reqs, cont)
    assert m["sessions"] == 6
    assert m["session_completion_mean_s"] < session_metrics(reqs, fcfs)["session_completion_mean_s"]


def test_session_lane_priorities_are_the_live_lanes():
    """The driver's priorities are the live SessionLane's ranks, mapped like the vLLM adapter's."""
    reqs, links = _contended()
    seen = []

    class Spy(SessionLaneDriver):
        def _priority(self, i, t):
            p = super()._priority(i, t)
            seen.append((i, t, p))
            return p

    import proxy.replay.lanes as lanes

    orig = lanes.SessionLaneDriver
    lanes.SessionLaneDriver = Spy
    try:
        _, rec = _run(reqs, links, "continue")
    finally:
        lanes.SessionLaneDriver = orig
    live = SessionLane("continue", 30.0, 0.0)
    # replay the live bookkeeping: ranks at arrival; s1 served (prompt computed + 1 output) before its second call
    expect = [lane_engine_priority(live.rank(("", f"s{k}"), 0.2 * (k - 1)), 1) for k in range(1, 7)]
    live.served(("", "s1"), 1250 * BS + 1, 0.0, rec.arrival[-1])
    expect.append(lane_engine_priority(live.rank(("", "s1"), rec.arrival[-1]), 1))
    assert [p for _, _, p in seen] == expect
    assert expect[-1] == 0 and all(0 <= p < LANE_LOWEST for p in expect)


def test_session_links_take_the_pause_after_the_nominal_latency():
    spec = preset("gaia", sessions=4, seed=1)
    reqs = generate(spec)
    dep, pause = session_links(reqs, spec.prefill_tokens_per_s, spec.decode_tokens_per_s)
    assert sum(d < 0 for d in dep) == len({r.session_id for r in reqs})
    for i, (d, p) in enumerate(zip(dep, pause)):
        if d >= 0:
            assert reqs[d].session_id == reqs[i].session_id and d < i and p >= 0
            if reqs[d].finish_reason == "tool_calls":  # the tool's duration is in the pause
                assert p >= reqs[d].tool_seconds - 1e-6
    with pytest.raises(ValueError, match="fanout"):
        fan = generate(preset("fanout", sessions=4))
        session_links(fan, 15000.0, 140.0)


def test_slack_lane_sends_every_action_at_the_lowest_priority_on_a_priority_engine():
    spec = preset("gaia", sessions=12, seed=0)
    reqs = generate(spec)
    s = ReplaySettings(block_size=spec.block_size)
    pol = make_policy("scout-proxy-lane", s)
    prios, loads = [], []
    from proxy.replay import engine_run

    orig = engine_run.EngineDriver.submit_action

    def spy(self, kind, reason, hashes, tokens, now, priority=0, on_done=None):
        prios.append(priority)
        return orig(self, kind, reason, hashes, tokens, now, priority, on_done)

    engine_run.EngineDriver.submit_action = spy
    orig_load = type(pol)._load
    type(pol)._load = lambda self, now: loads.append(orig_load(self, now)) or loads[-1]
    try:
        run_on_engine(pol, reqs, 600, s.cost, block_size=spec.block_size)
    finally:
        engine_run.EngineDriver.submit_action = orig
        type(pol)._load = orig_load
    assert pol.driver.engine.config.scheduling_policy == "priority"
    assert prios and set(prios) == {LANE_LOWEST}
    assert loads and all(ld.priority_lane for ld in loads)
    assert pol.extra()["executed"] > 0


def test_scout_proxy_without_the_lane_is_unchanged_by_the_lane_policy():
    spec = preset("gaia", sessions=8, seed=2)
    reqs = generate(spec)
    s = ReplaySettings(block_size=spec.block_size)
    a = replay(reqs, [500], ["scout-proxy"], s)["capacities"][0]["policies"]["scout-proxy"]
    b = replay(reqs, [500], ["scout-proxy", "scout-proxy-lane"], s)["capacities"][0]["policies"]
    assert b["scout-proxy"]["ttft_mean_s"] == a["ttft_mean_s"] and b["scout-proxy"]["hit_rate"] == a["hit_rate"]
    assert "scout-proxy-lane" in b


def test_lane_names():
    assert lane_names(None) == () and lane_names("") == ()
    assert lane_names("session,slack") == ("slack", "session") == lane_names("all")
    assert lane_names("sglang") == ("sglang",) and lane_names("all,sglang") == ("slack", "session", "sglang")
    with pytest.raises(ValueError):
        lane_names("fast")


TINY = GridSpec(
    presets=(GridPreset("gaia", 4, 2.0),), busy=(0.5, 0.9), cache_x=(1.0, 2.0), pauses=("fast",), extra_busy=()
)


def test_grid_lanes_add_the_lane_figures_and_keep_the_rest():
    plain = run_grid("tiny", jobs=1, grid=TINY)
    res = run_grid("tiny", jobs=1, grid=TINY, lanes=("slack", "session"))
    assert json.loads(json.dumps(res, default=float))
    assert "lanes" not in plain and res["lanes"] == ["slack", "session"]
    assert "scout-proxy-lane" in res["policies"] and "scout-proxy-lane" not in plain["policies"]
    for c0, c1 in zip(plain["grid"], res["grid"]):
        assert c0["params"] == c1["params"]
        for name, s in c0["policies"].items():  # every figure of the plain grid, bit for bit
            t = c1["policies"][name]
            assert {k: v for k, v in s.items() if not k.startswith("replay_")} == {
                k: v for k, v in t.items() if not k.startswith("replay_")
            }
        sl = c1["slack_lane"]
        assert set(sl["lane_worse_than_lru"]) == {"ttft_mean", "turn_mean", "throughput_replanned"}
        lane = c1["policies"]["scout-proxy-lane"]
        lru = c1["policies"]["lru"]
        assert sl["lane_worse_than_lru"]["ttft_mean"] == pytest.approx(lane["ttft_mean_s"] / lru["ttft_mean_s"] - 1)
        if c1["params"]["busy"] == 0.9:
            sess = c1["session_lane"]
            assert sess["closed_loop"] and set(sess["runs"]) == {
                "lru/fcfs",
                "lru/continue",
                "lru/las",
                "scout-proxy/fcfs",
                "scout-proxy-lane/fcfs",
                "scout-proxy-lane/continue",
                "scout-proxy-lane/las",
            }
            run, base = sess["runs"]["lru/las"], sess["runs"]["lru/fcfs"]
            assert sess["vs_fcfs"]["lru/las"]["session_completion_mean"] == pytest.approx(
                run["session_completion_mean_s"] / base["session_completion_mean_s"] - 1
            )
            assert "scout-proxy/fcfs" not in sess["vs_fcfs"] and "lru/fcfs" not in sess["vs_fcfs"]
        else:
            assert "session_lane" not in c1  # only at busy 70-90%
    summ = res["lanes_summary"]
    assert summ["slack"]["cells"] == 4 and summ["session"]["lru/continue"]["cells"] == 2
    from proxy.replay.grid_report import markdown

    md = markdown(res, {"title": "t", "command": "c"}, [])
    assert "### Slack lane" in md and "### Session lane" in md
    assert md.count("\n| gaia | fast |") == 4 + 2


def test_cli_lane_needs_the_grid(capsys):
    from proxy import cli

    rc = cli.main(["replay", "--workload", "gaia", "--lane", "slack", "--no-plots"])
    assert rc == 2 and "--lane needs --grid" in capsys.readouterr().err


def test_a_step_that_only_preempts_is_progress_in_the_closed_loop():
    """swebench at busy 0.9, cache = its running set: under `continue` a running request that cannot
    grow is itself the lowest priority and preempts itself (a step with no token); with every later
    arrival waiting on an answer that is progress, not a stall (it used to end the run)."""
    from proxy.replay import regimes
    from proxy.replay.grid import GRIDS, spec_for

    gp = next(p for p in GRIDS["default"].presets if p.name == "swebench")
    cap = regimes.running_set(generate(spec_for(gp, "fast", 0.7, 0)))["blocks_p90"]
    spec = spec_for(gp, "fast", 0.9, 0)
    reqs = generate(spec)
    links = session_links(reqs, spec.prefill_tokens_per_s, spec.decode_tokens_per_s)
    pol = LruPolicy()
    rec = run_on_engine(
        pol,
        reqs,
        cap,
        CostModel(),
        block_size=spec.block_size,
        # no ageing bound in effect (1e9 s): older sessions' calls always first, which is what makes
        # a running request of a newer session preempt itself here
        session_lane={"mode": "continue", "links": links, "ageing_s": 1e9},
    )
    assert pol.driver.idle_moves > 0 and pol.driver.engine.num_preemptions > 0
    assert (rec.turn > 0).all() and pol.driver.arrived == len(reqs)
