"""Hints are scoped to their caller (issue 22): tenant (cache_salt) and principal (credential hash).
No hint of one scope releases, plans, pins or names anything of another, and only a scope's own
traffic checks its hints (so no source earns standing from someone else's requests)."""

from __future__ import annotations

from proxy.core.hint_actions import Hint, HintDriver
from proxy.core.hints import ACCEPTED, FACT, HintConfig
from proxy.core.policy import ScoutPolicy

from .conftest import Workload, quiet_config

CFG = HintConfig(release_min_standing=0.0, directive_sources=frozenset({"kop"}))


def two_tenants() -> tuple[Workload, Workload, HintDriver]:
    policy = ScoutPolicy(quiet_config())
    wa, wb = Workload(policy, "A"), Workload(policy, "B")
    d = HintDriver(policy, CFG)
    d.scope.strict = True  # as live: an unknown owner is nobody
    policy.planner.hints = d
    return wa, wb, d


def seen(w: Workload, d: HintDriver, agent: int, session: str, principal: str, now: float, name: str | None = None):
    obs = w.step(agent, session, now)
    d.scope.own(w.tenant, session, principal)
    d.observe(w.tenant, session, obs.agent_id, name, now, principal)
    return obs


def test_a_release_touches_only_the_callers_own_session():
    wa, wb, d = two_tenants()
    seen(wa, d, 0, "s", "pa", 1.0)
    seen(wb, d, 1, "s", "pb", 1.0)
    sessions = wa.policy.sessions.sessions
    for tenant in ("A", "B", ""):  # B names A's tenant, its own, none: with A's session id
        d.submit([Hint("session_ended", "s")], "kb", 2.0, tenant=tenant, principal="pa-forged")
    assert ("A", "s") in sessions and ("B", "s") in sessions and d.released_sessions == 0
    assert d.submit([Hint("session_ended", "s")], "kb", 2.0, tenant="A", principal="pb") == [ACCEPTED]
    assert ("A", "s") in sessions  # accepted (admitted), but not B's to release
    d.submit([Hint("session_ended", "s")], "kb", 2.0, tenant="B", principal="pb")
    assert ("B", "s") not in sessions and ("A", "s") in sessions and d.released_sessions == 1


def test_plans_need_the_callers_session():
    wa, _wb, d = two_tenants()
    seen(wa, d, 0, "s", "pa", 1.0)
    d.submit([Hint("tool_started", "s")], "kb", 2.0, tenant="A", principal="pb")
    assert not d.plans
    d.submit([Hint("tool_started", "s")], "ka", 2.0, tenant="A", principal="pa")
    assert list(d.plans) == [("A", "s")]


def test_an_unknown_owner_is_nobodys_in_strict_mode():
    wa, _, d = two_tenants()
    wa.step(0, "orphan", 1.0)  # tracked by the policy, but no owner recorded
    d.submit([Hint("tool_started", "orphan")], "ka", 2.0, tenant="A", principal="")
    assert not d.plans


def test_agent_names_are_bound_per_scope_and_pins_follow_the_callers_binding():
    wa, wb, d = two_tenants()
    for k in range(3):
        a_obs = seen(wa, d, 0, f"a{k}", "pa", 1.0 + k, name="coder")
        b_obs = seen(wb, d, 1, f"b{k}", "pb", 1.5 + k, name="coder")  # B binds the same name later
    assert a_obs.agent_id and b_obs.agent_id and a_obs.agent_id != b_obs.agent_id
    assert d.scope.agent("A", "pa", "coder") == a_obs.agent_id
    assert d.scope.agent("B", "pb", "coder") == b_obs.agent_id
    assert d.scope.agent("A", "pb", "coder") is None  # B's binding is not visible in A's tenant
    d.submit([Hint("pin", agent="coder", ttl_s=60)], "kop", 5.0, tenant="A", principal="pa")
    assert list(d.pins) == [("a", a_obs.agent_id)]


def test_only_the_scopes_own_traffic_checks_its_hints():
    wa, _wb, d = two_tenants()
    seen(wa, d, 0, "s", "pa", 1.0)
    before = d.trust.weight("kb", FACT)
    d.submit([Hint("tool_started", "s")], "kb", 2.0, tenant="A", principal="pb")  # about A's session
    seen(wa, d, 0, "s", "pa", 3.0)  # A resumes: that does not confirm B's claim
    assert d.trust.weight("kb", FACT) <= before and d.trust.pending == 1
    d.candidates(2.0 + CFG.resume_horizon_s + 1)  # its deadline passes: refuted
    assert d.trust.weight("kb", FACT) < before and d.trust.pending == 0
