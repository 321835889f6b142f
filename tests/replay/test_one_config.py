"""Issue 14 item 2: live, replay and the demo's proxy build one PolicyConfig from the same Settings."""

from __future__ import annotations

from proxy.core.config import PolicyConfig
from proxy.replay.scout import build_config
from proxy.runtime.policy_config import executor_limits, policy_config
from proxy.settings import Settings


def test_live_and_replay_build_identical_configs():
    s = Settings(
        policy_overrides={"cooldown_s": 2, "top_k": 1, "retain_sessions": 1},
        action_ttl=3.0,
        action_concurrency=3,
        action_max_waiting=5,
        policy_r_min=0.4,
    )
    live = policy_config(s, capacity_tokens=640 * 16, prefill_tokens_per_s=15_000.0, retain=False)
    replay = build_config(640, 16, s, retain=False, prefill_tokens_per_s=15_000.0)
    assert live == replay
    assert (live.action_ttl_s, live.max_concurrent, live.max_engine_waiting) == (3.0, 6, 5)
    assert live.cooldown_s == 2.0 and live.top_k == 1 and live.retain_sessions is True and live.r_min == 0.4
    assert isinstance(live, PolicyConfig)
    assert executor_limits(s).concurrency == 3 and executor_limits(s).max_waiting == 5


def test_one_waiting_threshold_for_planner_and_executor():
    """The planner's `max_engine_waiting` and the executor's waiting limit are one value: the
    setting by default, and both follow a `policy_overrides` entry for it."""
    s = Settings(action_max_waiting=7)
    assert policy_config(s).max_engine_waiting == executor_limits(s).max_waiting == 7
    s = Settings(action_max_waiting=7, policy_overrides={"max_engine_waiting": 3})
    assert policy_config(s).max_engine_waiting == executor_limits(s).max_waiting == 3
    assert executor_limits(Settings()).max_waiting == Settings().action_max_waiting == 4  # default kept


def test_replay_defaults_are_the_live_defaults():
    """Without settings the replay uses Settings' defaults (not the core's): same as `cachescout serve`."""
    assert build_config(100, 16) == policy_config(Settings.model_construct(), capacity_tokens=1600)
