"""Agents found vs truth on the framework corpus: ``python -m tests.corpus.measure``.

Runs each shape through a fresh ``ScoutPolicy`` exactly as the live proxy does (canonical view of
the HTTP body, then ``observe_request``), and scores the online assignment:
- found: agents alive in the registry at the end (must equal the shape's true agents);
- purity: over requests that got an agent, the share that belong to their agent's majority truth;
- recall: over requests of true agents, the share assigned to the found agent that represents
  their truth (its majority agent);
- late_misses: requests from a true agent's 4th call on that were not assigned to its agent
  ("found after at most 3 calls per agent");
- one_off_assigned: one-off requests given an agent, as a share of all one-offs;
- task_agents: agents (alive at the end or not) whose requests all came from one task, counted
  only when they got >= 2 requests: a per-task context taken for an agent (issue 23);
- ``ids``: what the app sends (``frameworks.with_ids``): none, one id per run, a constant ``user``,
  a constant ``prompt_cache_key``. ``python -m tests.corpus.measure --ids`` prints every mode.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from proxy.core import PolicyConfig, ScoutPolicy, view_from_openai

from .frameworks import ALL_SHAPES, IDS, SHAPES, corpus


def evaluate(shape: str, seed: int = 0, tasks: int = 12, ids: str = "none") -> dict:
    policy = ScoutPolicy(PolicyConfig())
    reqs = corpus(shape, tasks=tasks, seed=seed, ids=ids, with_task=True)
    assigned: list[tuple[str | None, str | None]] = []
    tasks_of: dict[str, set] = defaultdict(set)
    for i, (path, body, truth, task) in enumerate(reqs):
        view = view_from_openai(path, body, {})
        assert view is not None, (shape, path)
        obs = policy.observe_request(view, float(i))
        assigned.append((truth, obs.agent_id))
        if obs.agent_id is not None:
            tasks_of[obs.agent_id].add(task)
    by_agent: dict[str, Counter] = defaultdict(Counter)
    for truth, aid in assigned:
        if aid is not None:
            by_agent[aid][truth] += 1
    majority = {aid: c.most_common(1)[0][0] for aid, c in by_agent.items()}
    pure = sum(c.most_common(1)[0][1] for c in by_agent.values())
    n_assigned = sum(sum(c.values()) for c in by_agent.values())
    # the found agent representing each truth: the one holding most of its requests
    rep: dict[str, str] = {}
    per_truth: dict[str, Counter] = defaultdict(Counter)
    for truth, aid in assigned:
        if truth is not None and aid is not None and majority.get(aid) == truth:
            per_truth[truth][aid] += 1
    for truth, c in per_truth.items():
        rep[truth] = c.most_common(1)[0][0]
    truths = Counter(t for t, _ in assigned if t is not None)
    seen: Counter = Counter()
    late = hits = 0
    for truth, aid in assigned:
        if truth is None:
            continue
        seen[truth] += 1
        ok = aid is not None and aid == rep.get(truth)
        hits += ok
        if seen[truth] > 3 and not ok:
            late += 1
    one_offs = [aid for t, aid in assigned if t is None]
    alive = set(policy.agents.by_id)
    return {
        "shape": shape,
        "ids": ids,
        "requests": len(reqs),
        "true_agents": ALL_SHAPES[shape][1],
        "truths_seen": len(truths),
        "found": len(alive),
        "purity": pure / n_assigned if n_assigned else 1.0,
        "recall": hits / sum(truths.values()),
        "late_misses": late,
        "one_off_assigned": sum(a is not None for a in one_offs) / max(1, len(one_offs)),
        "task_agents": sum(
            1 for a, t in tasks_of.items() if len(t) == 1 and None not in t and sum(by_agent[a].values()) >= 2
        ),
        "sessions": policy.sessions.created,
        "promotions": policy.agents.promotions,
        "retirements": policy.agents.retirements,
        "index_bytes": policy.agents.index.bytes,
    }


def main() -> None:
    import sys

    modes = IDS if "--ids" in sys.argv else ("none",)
    for shape in ALL_SHAPES if "--all" in sys.argv or "--ids" in sys.argv else SHAPES:
        for ids in modes:
            r = evaluate(shape, ids=ids)
            print(
                f"{shape:11s} {ids:4s} requests {r['requests']:4d}  "
                f"agents found {r['found']:2d} / true {r['true_agents']}  "
                f"task contexts as agents {r['task_agents']}  sessions {r['sessions']}  "
                f"purity {r['purity']:.3f}  recall {r['recall']:.3f}  late misses {r['late_misses']}  "
                f"one-offs assigned {r['one_off_assigned']:.1%}  promotions {r['promotions']} "
                f"retired {r['retirements']}  index {r['index_bytes'] / 1024:.0f} KiB"
            )


if __name__ == "__main__":
    main()
