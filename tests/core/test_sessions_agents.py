"""Sessions (explicit ids, chain inference, TTL, cap) and agent identity (skip learning, cap)."""

from __future__ import annotations

import json

from proxy.core import PolicyConfig, ResponseOutcome, ScoutPolicy, view_from_blocks, view_from_openai

CHAT = "/v1/chat/completions"


def chat(system, msgs, **kw):
    return view_from_openai(CHAT, {"model": "m", "messages": [{"role": "system", "content": system}] + msgs, **kw}, {})


def test_explicit_session_ids_group_requests():
    p = ScoutPolicy()
    for k, anchor in enumerate(([1, 2], [7, 8])):  # agents are found when their prefix recurs
        for i in range(2):
            p.observe_request(
                view_from_blocks("", anchor + [90 + 2 * k + i], 16, anchor_blocks=2, session_id=f"p{k}{i}"), 0.0
            )
    a = p.observe_request(view_from_blocks("", [1, 2, 3], 16, anchor_blocks=2, session_id="s1"), 0.0)
    b = p.observe_request(view_from_blocks("", [7, 8, 9], 16, anchor_blocks=2, session_id="s1"), 1.0)
    c = p.observe_request(view_from_blocks("", [1, 2, 4], 16, anchor_blocks=2, session_id="s2"), 2.0)
    assert a.session_id == b.session_id == "s1" and c.session_id == "s2"
    assert a.agent_id == c.agent_id != b.agent_id
    assert p.stats().transitions == 1  # only s1 had two steps


def test_sessions_are_inferred_from_chain_extension():
    p = ScoutPolicy()
    planner_sys, coder_sys = "You plan. " * 20, "You code. " * 20
    turn1 = [{"role": "user", "content": "task A"}]
    o1 = p.observe_request(chat(planner_sys, turn1), 0.0)
    p.observe_response(o1.request_id, ResponseOutcome("tool_calls"), 1.0)
    other = p.observe_request(chat(planner_sys, [{"role": "user", "content": "task B"}]), 1.5)
    turn2 = turn1 + [{"role": "assistant", "content": "plan"}, {"role": "user", "content": "go on"}]
    o2 = p.observe_request(chat(planner_sys, turn2), 2.0)
    assert o2.session_id == o1.session_id != other.session_id
    # a system prompt followed by the conversation: an agent on first sight (tentatively)
    assert o1.agent_id == o2.agent_id == other.agent_id is not None
    # a different agent (system prompt) never continues a session by chain, but the same
    # conversation after it does continue it (a group chat: issue 23)
    o3 = p.observe_request(chat(coder_sys, turn2), 3.0)
    assert o3.session_id == o1.session_id
    assert o3.agent_id != o1.agent_id
    o4 = p.observe_request(chat(coder_sys, [{"role": "user", "content": "task C"}]), 4.0)
    assert o4.session_id not in (o1.session_id, other.session_id)


def test_inference_handles_a_re_cut_partial_last_block():
    """Trace-style ids: the child re-cuts the parent's partial last block (Mooncake rule)."""
    p = ScoutPolicy()
    p.observe_request(view_from_blocks("", [1, 77], [512, 300]), 0.0)  # another conversation
    o1 = p.observe_request(view_from_blocks("", [1, 2, 3], [512, 512, 100]), 0.0)
    o2 = p.observe_request(view_from_blocks("", [1, 2, 30, 31], [512, 512, 512, 40]), 1.0)
    assert o2.session_id == o1.session_id
    o3 = p.observe_request(view_from_blocks("", [1, 5, 6], [512, 512, 100]), 2.0)
    assert o3.session_id != o1.session_id  # shares only the template block


def test_sessions_expire_and_are_capped():
    p = ScoutPolicy(PolicyConfig(session_ttl_s=10.0, max_sessions=3))
    for k in range(5):
        p.observe_request(view_from_blocks("", [1, 2, 100 + k], 16, anchor_blocks=2, session_id=f"s{k}"), float(k))
    assert p.stats().sessions == 3
    p.observe_request(view_from_blocks("", [1, 2, 200], 16, anchor_blocks=2, session_id="late"), 100.0)
    assert p.stats().sessions == 1


def test_warmups_are_never_learned_from():
    p = ScoutPolicy(PolicyConfig(residency_stride=1))
    for t, blocks in enumerate(([1, 2, 3], [4, 5, 6], [1, 2, 7])):
        obs = p.observe_request(
            view_from_blocks("", blocks, 16, anchor_blocks=2, session_id="s", max_tokens=1), float(t)
        )
        assert obs.agent_id is None
    assert p.stats().agents == 0 and p.stats().transitions == 0 and p.stats().sessions == 0
    assert p.residency.resident_prefix([4, 5, 6]) == 3  # but the shadow saw them forwarded


def test_a_first_sight_system_prompt_that_never_recurs_is_dropped():
    p = ScoutPolicy(PolicyConfig(first_sight_window=8))
    first = p.observe_request(chat("Per-call documents: " + "doc0 " * 40, [{"role": "user", "content": "q"}]), 0.0)
    assert first.agent_id is not None and len(p.agents) == 1  # tentative
    for k in range(1, 10):
        p.observe_request(chat(f"Per-call documents: doc{k} " * 40, [{"role": "user", "content": "q"}]), float(k))
    assert len(p.agents) <= 8 and first.agent_id not in p.agents.by_id and p.agents.discarded >= 1
    system_only = view_from_openai(CHAT, {"model": "m", "messages": [{"role": "system", "content": "sel " * 50}]}, {})
    assert p.observe_request(system_only, 20.0).agent_id is None  # nothing follows: must recur


def test_raw_prompt_agents_are_the_deepest_recurring_prefix_not_the_shared_template():
    p = ScoutPolicy()
    template = [900, 901, 902]  # shared by every request (a preamble)
    ids = {}
    for k, agent in enumerate([1, 2, 1, 2, 1, 2, 1, 2]):
        body = template + [agent * 10, agent * 10 + 1] + [5000 + k, 6000 + k]
        ids[k] = p.observe_request(view_from_blocks("", body, 16, session_id=f"x{k}"), float(k)).agent_id
    # each agent is found at its third call (three one-off tails from distinct sources), stable after
    assert ids[0] is ids[1] is ids[2] is ids[3] is None
    assert ids[4] == ids[6] != ids[5] == ids[7] and None not in (ids[4], ids[5])
    assert p.agents.by_id[ids[4]].anchor_hashes == tuple(template + [10, 11])
    assert len(p.agents) == 2  # the template itself is no agent


def test_a_preamble_promoted_before_its_agents_were_told_apart_is_retired():
    p = ScoutPolicy()
    pre = [900, 901]
    for k, agent in enumerate([1, 2, 3]):  # first calls of three agents: looks like one agent
        p.observe_request(view_from_blocks("", pre + [agent * 10, 7000 + k], 16, session_id=f"a{k}"), float(k))
    first = {a.agent_id for a in p.agents.by_id.values()}
    assert len(first) == 1 and next(iter(p.agents.by_id.values())).anchor_hashes == tuple(pre)
    ids = {}
    for k in range(12):
        agent = 1 + k % 3
        ids[k] = p.observe_request(
            view_from_blocks("", pre + [agent * 10, 8000 + k], 16, session_id=f"b{k}"), 10.0 + k
        ).agent_id
    assert p.agents.retirements == 1 and not first & set(p.agents.by_id)  # the preamble is gone
    assert len(p.agents) == 3 and len({ids[9], ids[10], ids[11]}) == 3


def test_exact_whole_prompt_repeats_are_an_agent_whose_anchor_is_the_whole_prompt():
    p = ScoutPolicy()
    prompt = [5, 6, 7, 8]
    obs = [p.observe_request(view_from_blocks("", prompt, 16), float(k)) for k in range(3)]
    assert obs[0].agent_id is None and obs[1].agent_id == obs[2].agent_id is not None
    agent = p.agents.by_id[obs[2].agent_id]
    assert agent.anchor_hashes == tuple(prompt) and agent.repeats >= 1


def test_agent_registry_is_bounded_and_evicts_the_least_valuable():
    p = ScoutPolicy(PolicyConfig(max_agents=3))
    for t in range(5):
        p.observe_request(view_from_blocks("", [1, 2, 50 + t], 16, anchor_blocks=2, session_id="a"), float(t))
    for k in range(5):
        for i in range(2):
            p.observe_request(
                view_from_blocks("", [100 + k, 200 + k, 300 + i], 16, anchor_blocks=2, session_id=f"b{k}"), 10.0 + k
            )
    assert p.stats().agents == 3
    assert p.agents.tenant("").agents.get(2) is not None  # the popular agent survived
    assert p.agents.evictions == 3


def test_tenants_are_isolated():
    p = ScoutPolicy()
    body = {"model": "m", "messages": [{"role": "system", "content": "S" * 100}, {"role": "user", "content": "q"}]}
    a = p.observe_request(view_from_openai(CHAT, body, {"x-session-id": "s"}), 0.0)
    b = p.observe_request(view_from_openai(CHAT, {**body, "cache_salt": "t2"}, {"x-session-id": "s"}), 1.0)
    assert a.agent_id != b.agent_id and None not in (a.agent_id, b.agent_id)
    assert p.stats().transitions == 0  # same session id, different tenants
    assert set(p.stats().predictability_by_tenant) == {"", "t2"}
    json.dumps(p.snapshot())


def test_per_user_salts_do_not_grow_state_without_bound():
    p = ScoutPolicy(PolicyConfig(max_agents=4, max_sessions=8, residency_max_entries=50, residency_stride=1))
    for k in range(200):
        for i in range(2):
            p.observe_request(
                view_from_blocks(
                    f"salt{k}", [k * 10 + 1, k * 10 + 2, k * 10 + 3 + i], 16, anchor_blocks=2, session_id="s"
                ),
                float(k),
            )
    assert p.stats().agents <= 4 and len(p.agents.tenants) <= 4
    assert len(p.agents.index.roots) <= 200 and p.agents.index.bytes <= p.agents.index.max_bytes
    assert p.stats().sessions <= 8
    assert len(p.residency) <= 50 and p.residency.capacity_tokens == 0
    # a tenant whose only agent is evicted while it adds another keeps a consistent state
    q = ScoutPolicy(PolicyConfig(max_agents=1))
    for i in range(2):
        q.observe_request(view_from_blocks("t", [1, 2, 10 + i], 16, anchor_blocks=2, session_id="a"), 0.0)
    for i in range(2):
        obs = q.observe_request(view_from_blocks("t", [3, 4, 20 + i], 16, anchor_blocks=2, session_id="a"), 1.0)
    assert q.agents.tenant("t").agents[4].agent_id == obs.agent_id and q.stats().agents == 1


def test_tool_resume_by_the_same_agent_is_not_a_transition():
    """A -> (tool_calls) -> A resumes -> B: the learned chain says B follows A, with no A->A."""
    from proxy.core import ScoutPolicy

    from .conftest import Workload, quiet_config

    w = Workload(ScoutPolicy(quiet_config()))
    now = 0.0
    for s in range(10):
        w.step(0, f"s{s}", now, finish="tool_calls")
        w.step(0, f"s{s}", now + 1)
        w.step(1, f"s{s}", now + 2)
        now += 10
    learner = w.policy.agents.tenant("").learner
    a, b = (w.policy.agents.tenant("").agents[k].slot for k in (w.anchor(0)[-1], w.anchor(1)[-1]))
    assert learner.count(a, a) == 0 and learner.count(a, b) > 0
    assert learner.predict_top1(a) == b
    assert w.policy.tool_resumes == 10
    st = w.policy.stats()
    assert st.top1_accuracy == 1.0
    # an explicit different agent after tool_calls is still a transition
    w.step(0, "x", now, finish="tool_calls")
    w.step(1, "x", now + 1)
    assert learner.count(a, b) > 9


def test_agent_churn_keeps_bfs_sources_consistent():
    """Evictions drop an agent from its sessions lazily: the BFS-source counts must still only
    name live agents and match the sessions that sit on them."""
    from collections import Counter

    from proxy.core import ScoutPolicy

    from .conftest import Workload, quiet_config

    w = Workload(ScoutPolicy(quiet_config(max_agents=8)))
    now = 0.0
    for k in range(300):
        now += 0.1
        w.step((k * 7) % 37, f"s{k % 23}", now)
    pol = w.policy
    assert len(pol.agents) <= 8 and pol.agents.evictions > 0
    live = {(a.tenant, a.slot) for a in pol.agents.by_id.values()}
    expected = Counter(
        (s.agent.tenant, s.agent.slot)
        for s in pol.sessions.sessions.values()
        if s.agent is not None and pol.agents.alive(s.agent)
    )
    assert set(pol.sessions.on_agent) <= live
    assert dict(pol.sessions.on_agent) == dict(expected)


def _groupchat(p, sys_of, chats, rounds, ids, t0=0.0):
    """``chats`` group chats interleaved; each turn a different agent's system prompt + the shared
    conversation (by content); on odd rounds the agent calls a tool first (its own rounds; the
    others see only its answer). ``ids``: None, "per" (one id per chat) or "const" (one for all)."""
    conv = {c: [{"role": "user", "content": f"task {c} " + "w " * 30}] for c in range(chats)}
    out = []
    t = t0
    for r in range(rounds):
        for c in range(chats):
            kw = {} if ids is None else {"user": f"chat-{c}" if ids == "per" else "app"}
            sys_p = sys_of[(r + c) % len(sys_of)]
            own: list = []
            for tool_round in range(2 if r % 2 else 1):  # odd rounds: a tool call, then the answer
                o = p.observe_request(chat(sys_p, conv[c] + own, **kw), t)
                done = tool_round == (1 if r % 2 else 0)
                p.observe_response(o.request_id, ResponseOutcome("stop" if done else "tool_calls"), t + 0.5)
                out.append((c, o))
                call = {"id": f"c{r}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                own = [
                    {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": f"c{r}", "content": f"result {c}/{r}"},
                ]
                t += 0.25
            conv[c] = conv[c] + [{"role": "user", "name": f"a{r}", "content": f"reply {c}/{r} " + "v " * 20}]
            t += 1.0
    return out


def test_a_conversation_continues_across_agents_with_or_without_ids():
    """Issue 23: the group chat's sessions are its conversations, whatever ids the app sends: none,
    one per chat, or one constant `user` for the whole app (which must not collapse them)."""
    sys_of = [f"You are agent {k}. " + "rules " * 40 for k in range(3)]
    for ids in (None, "per", "const"):
        p = ScoutPolicy()
        out = _groupchat(p, sys_of, chats=4, rounds=6, ids=ids)
        by_chat: dict = {}
        for c, o in out:
            by_chat.setdefault(c, set()).add(o.conversation)
        assert all(len(v) == 1 for v in by_chat.values()), (ids, by_chat)
        assert len(set().union(*by_chat.values())) == 4, ids
        assert p.sessions.created == 4, ids
        # transitions learned per conversation: agent k -> k+1, never across chats
        ts = next(iter(p.agents.tenants.values()))
        assert p.stats().transitions >= 4 * 5 - 3, ids
        slots = {a.agent_id: a.slot for a in ts.agents.values()}
        assert len(slots) == 3


def test_a_run_id_over_many_conversations_learns_the_run_transition():
    """One id over a run: the supervisor's conversation, then a researcher's own conversation. The
    researcher's first call continues nothing, so it starts a new session in the run, and the
    transition supervisor -> researcher is learned from the run."""
    p = ScoutPolicy()
    sup, res = "You supervise. " * 30, "You research. " * 30
    for run in range(3):
        kw = {"metadata": {"session_id": f"run{run}"}}
        o1 = p.observe_request(chat(sup, [{"role": "user", "content": f"brief {run} " + "b " * 30}], **kw), 10.0 * run)
        p.observe_response(o1.request_id, ResponseOutcome("tool_calls"), 10.0 * run + 1)
        o2 = p.observe_request(
            chat(res, [{"role": "user", "content": f"topic {run} " + "t " * 30}], **kw), 10.0 * run + 2
        )
        assert o2.conversation != o1.conversation and o2.conversation.startswith(f"run{run}")
        assert o1.session_id == o2.session_id == f"run{run}"  # the client's own id, for hints
        assert o1.agent_id and o2.agent_id and o1.agent_id != o2.agent_id
    assert p.sessions.run_splits == 3
    assert p.stats().transitions >= 2  # supervisor -> researcher, learned per run


def test_a_template_re_rendered_per_task_is_one_agent_and_a_preamble_is_not_a_template():
    """Issue 23 rule 2 on block chains. A template (blocks 1-4) re-rendered per task: the task's
    blocks, then a fresh state per call (no call extends another): one agent, the template; each
    task's prefix stays its context. Five agents behind a shared preamble, called in every task,
    stay five agents: they keep being reached while no new siblings are born."""
    p = ScoutPolicy()
    t = 0.0
    for task in range(12):
        for call in range(3):
            ids = [1, 2, 3, 4, 1000 + task, 2000 + task, 10_000 + 10 * task + call]
            p.observe_request(view_from_blocks("", ids, 16), t)
            t += 1.0
    assert len(p.agents) == 1
    (agent,) = p.agents.by_id.values()
    assert agent.anchor_len == 4 and agent.node is not None and agent.node.template
    q = ScoutPolicy()
    for task in range(12):
        for k in range(5):
            ids = [1, 2, 3, 4, 100 * (k + 1), 100 * (k + 1) + 1, 50_000 + 10 * task + k]
            q.observe_request(view_from_blocks("", ids, 16), t)
            t += 1.0
    assert len(q.agents) == 5
    assert not any(a.node is not None and a.node.template for a in q.agents.by_id.values())
