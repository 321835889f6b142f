"""Session inference on a real trace (Mooncake FAST'25 conversation trace, from ../shared/traces)."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import pytest

from proxy.core import PolicyConfig, ScoutPolicy, view_from_blocks

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
CONVERSATION = TRACES / "conversation_trace.jsonl"


@pytest.mark.skipif(not CONVERSATION.exists(), reason=f"shared traces not present at {TRACES}")
def test_inferred_sessions_follow_the_trace_parent_rule():
    """README rule: a request's parent is an earlier request whose prompt (or that prompt minus its
    last partial block) is a prefix of it. Block 0 is a shared system block opening every request,
    so a one-block prompt is not counted as a parent (what every conversation shares)."""
    with CONVERSATION.open() as f:
        records = [json.loads(line) for line in islice(f, 1500)]
    policy = ScoutPolicy(PolicyConfig(residency_stride=1))
    prompts: set[tuple[int, int]] = set()
    known_sessions: set[str] = set()
    agree = with_parent = 0
    for r in records:
        ids = r["hash_ids"]
        n = len(ids)
        tokens = [512] * n
        tokens[-1] = r["input_length"] - 512 * (n - 1)
        has_parent = any((i, ids[i - 1]) in prompts for i in range(2, n + 1))
        obs = policy.observe_request(view_from_blocks("", ids, tokens), r["timestamp"] / 1000)
        continued = obs.session_id in known_sessions
        known_sessions.add(obs.session_id)
        with_parent += has_parent
        agree += has_parent == continued
        prompts.add((n, ids[-1]))
        if n > 1 and tokens[-1] < 512:
            prompts.add((n - 1, ids[-2]))
    assert with_parent > 300  # the trace really is multi-turn
    assert agree / len(records) >= 0.98
    # conversations are not agents: only prefixes that several conversations re-send become one
    assert len(policy.agents) < len(known_sessions) / 20
