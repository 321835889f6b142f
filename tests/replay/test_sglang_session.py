"""`sglang-session`: the proxy's sessions tag SGLang's session radix cache in the replay's engine, and
its close rule ends finished ones (proxy/replay/sglang_session.py)."""

from __future__ import annotations

from proxy.cachemodel.cost_model import CostModel
from proxy.core.session_close import CloseParams
from proxy.replay.runner import ReplaySettings, make_policy, run_policy
from proxy.replay.traces import ReplayRequest

COST = CostModel()
BS = 16


def _blk(t, hashes, **kw):
    return ReplayRequest(
        t=t, tenant="", block_hashes=tuple(hashes), block_tokens=(BS,) * len(hashes), output_tokens=4, **kw
    )


def _stream():
    """Session `s` answers (a plain stop) and comes back 30 s later; meanwhile one-shot requests
    without a session flood a 16-block cache."""
    ctx = list(range(1, 11))
    reqs = [_blk(0.0, ctx, session_id="s", finish_reason="stop")]
    reqs += [_blk(1.0 + 2.0 * k, [1000 + 20 * k + j for j in range(12)]) for k in range(10)]
    reqs.append(_blk(30.0, [*ctx, 11, 12], session_id="s"))
    return reqs


def test_every_request_carries_the_proxys_session_and_noclose_keeps_them_all_live():
    """The core gives every request a session (a one-shot is a session of one turn), so without
    closes every block is some live session's: the order falls back to LRU by reference count."""
    reqs = _stream()
    lru = run_policy(make_policy("lru", ReplaySettings()), reqs, 16, COST)
    pol = make_policy("sglang-session-noclose", ReplaySettings())
    rec = run_policy(pol, reqs, 16, COST)
    assert pol.extra()["closes"] == 0 and pol.extra()["live_sessions_at_end"] == 11
    assert rec.hit_blocks[-1] == lru.hit_blocks[-1] == 0


def test_the_close_rule_closes_every_session_idle_past_its_think_time():
    reqs = _stream()
    pol = make_policy("sglang-session", ReplaySettings())
    pol.close_params = CloseParams(default_idle_s=5.0, min_idle_s=1.0)
    run_policy(pol, reqs, 16, COST)
    extra = pol.extra()
    assert extra["closes"] == 12  # 10 one-shots, s before its return, s again after it
    assert extra["live_sessions_at_end"] == 0 and extra["closes_refused"] == 0


def test_a_session_ending_in_a_tool_call_is_never_closed():
    reqs = [_blk(0.0, list(range(1, 11)), session_id="s", finish_reason="tool_calls")]
    reqs.append(_blk(50.0, [900, 901], session_id="u", finish_reason="stop"))
    pol = make_policy("sglang-session", ReplaySettings())
    pol.close_params = CloseParams(default_idle_s=5.0, min_idle_s=1.0)
    run_policy(pol, reqs, 16, COST)
    assert pol.extra()["closes"] == 1 and pol.extra()["live_sessions_at_end"] == 1


def test_session_oracle_keeps_the_session_that_returns():
    """The reference: the one-shots never come back, so their blocks go before the returning session's."""
    ctx = list(range(1, 11))
    reqs = [_blk(0.0, ctx, session_id="s")]
    reqs += [_blk(1.0 + 2.0 * k, [1000 + 20 * k + j for j in range(4)], session_id=f"o{k}") for k in range(10)]
    reqs.append(_blk(30.0, [*ctx, 11, 12], session_id="s"))
    lru = run_policy(make_policy("lru", ReplaySettings()), reqs, 16, COST)
    rec = run_policy(make_policy("session-oracle", ReplaySettings()), reqs, 16, COST)
    assert lru.hit_blocks[-1] < 10
    assert rec.hit_blocks[-1] == 10
