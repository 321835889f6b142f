"""On a text trace, a lineage that resumes after a gap is kept or re-warmed as a resume (issue 23
item 5): one open_deep_research run rendered as an ``lmcache`` trace (one session id over the
supervisor, the parallel researchers and the one-off prompts, as the real trace carries it).

Without lineages (main, and the default: ``lineage_resume`` is off) every call joins the run's one
session, no resume is seen and scout-proxy equals LRU in every cell; with them a researcher's
paused context is kept or re-warmed when the engine has slack, and on this run scout-proxy beats
LRU where the trace has headroom and is never below it (on other seeds it is not: docs/replay.md
"Text traces")."""

from __future__ import annotations

from proxy.replay.runner import ReplaySettings, replay
from proxy.replay.traces import load_trace
from tests.corpus.text_traces import write


def test_a_deep_research_run_as_text_resumes_its_lineages(tmp_path):
    path = tmp_path / "odr.jsonl"
    assert write("odr_run", 1, str(path), seed=3) == 28
    reqs = load_trace(path, "lmcache").requests
    assert {r.session_id for r in reqs} == {"run-0"}
    res = replay(reqs, [311, 448, 622], ["scout-proxy"], ReplaySettings(scout_overrides={"lineage_resume": True}))
    rows = {row["capacity_blocks"]: row["policies"] for row in res["capacities"]}
    for cap, pol in rows.items():
        lru, scout = pol["lru"]["hit_rate"], pol["scout-proxy"]["hit_rate"]
        # never worse than LRU by more than 0.1 pp (at 622 blocks LRU keeps nearly everything; since
        # the shadow charges prompts' tails, issue 25, scout-proxy reads 0.04 pp below it there)
        assert scout >= lru - 0.001, (cap, scout, lru)
    at = rows[448]
    assert at["belady"]["hit_rate"] - at["lru"]["hit_rate"] >= 0.05  # headroom here
    assert at["scout-proxy"]["hit_rate"] > at["lru"]["hit_rate"] + 0.01
    assert at["scout-proxy"]["ttft_mean_s"] < at["lru"]["ttft_mean_s"]
    emitted = at["scout-proxy"]["extra"]["actions_emitted"]
    assert sum(v for k, v in emitted.items() if k.endswith("/tool_resume")) >= 1, emitted
