"""scout-proxy in the replay plans on the live runtime's timer too, not only on requests and
responses (proxy/replay/scout.py `next_wakeup`; live: `LiveRuntime._tick_loop`)."""

import math

from proxy.replay.grid import GRIDS, cost_for, spec_for
from proxy.replay.runner import ReplaySettings, run_policy
from proxy.replay.scout import ScoutProxyPolicy, default_settings
from proxy.replay.workloads import generate


class Recording(ScoutProxyPolicy):
    """scout-proxy that notes when each action went to the engine, and its ticks' schedule."""

    def setup(self, requests, capacity_blocks, cost, rec):
        super().setup(requests, capacity_blocks, cost, rec)
        self.sent_at: list[float] = []
        self.after_stream: list[float] = []
        self.first_tick: tuple[float, float] | None = None  # (first arrival, the tick asked for then)

    def _execute(self, a, now):
        self.sent_at.append(now)
        return super()._execute(a, now)

    def on_request(self, i, req, now):
        super().on_request(i, req, now)
        if self.first_tick is None:
            self.first_tick = (now, self.next_wakeup())

    def on_end(self, now):
        self.after_stream.append(self.next_wakeup())
        super().on_end(now)


def run_demo_cell(seed: int = 0) -> Recording:
    gp = GRIDS["demo"].presets[0]
    reqs = generate(spec_for(gp, "own", 0.22, seed))
    st = ReplaySettings(block_size=16, latency_budget_s=gp.budget_s, cost=cost_for(gp))
    pol = Recording({}, False, 16, settings=default_settings({}))
    run_policy(pol, reqs, gp.capacity_blocks[0], st.cost, None, st.engines, 0, st.block_size)
    return pol


def test_tool_pause_wakes_are_served_on_the_tick_between_requests():
    """In the demo's replay cell the tool pauses' wakes fall in quiet stretches: some actions go out
    at a tick (a multiple of policy_plan_interval), when no request arrived or finished. Event times
    are arbitrary floats, so without the timer none would sit on the tick grid."""
    pol = run_demo_cell()
    tick = default_settings({}).policy_plan_interval
    assert tick == 0.25
    on_tick = [t for t in pol.sent_at if abs(t / tick - round(t / tick)) < 1e-9]
    assert pol.sent_at and len(on_tick) >= 3, (len(on_tick), len(pol.sent_at))


def test_ticks_run_during_the_stream_and_stop_after_it():
    pol = run_demo_cell()
    assert pol.first_tick is not None
    first, wake = pol.first_tick
    assert first < wake <= first + pol.tick_s  # the next tick on the timer's grid
    assert pol.after_stream == [math.inf]  # the run ended: nothing to come, nothing in flight
