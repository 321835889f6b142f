"""The oracle keeper's decomposition (proxy/replay/oracle_blind.py): the same warms without the
arrival times (`oracle-keeper-blind`), and without knowing which sessions return (`gap-keeper`)."""

from __future__ import annotations

from proxy.cachemodel.cost_model import CostModel
from proxy.replay.oracle_blind import MIN_SAMPLES, GapQuantiles
from proxy.replay.runner import ReplaySettings, make_policy, run_policy
from proxy.replay.traces import ReplayRequest

COST = CostModel()
BS = 16
CTX = list(range(1, 11))


def _blk(t, hashes, **kw):
    return ReplayRequest(
        t=t, tenant="", block_hashes=tuple(hashes), block_tokens=(BS,) * len(hashes), output_tokens=4, **kw
    )


def _trace(resume_at: float | None) -> list[ReplayRequest]:
    """Three sessions teach a ~2 s tool pause; then session s pauses while other traffic evicts its
    context, and resumes at `resume_at` (never, when None)."""
    reqs = []
    for k, sid in enumerate("abc"):
        reqs.append(_blk(0.1 * k, [100 * (k + 1) + j for j in range(3)], session_id=sid, finish_reason="tool_calls"))
        reqs.append(_blk(2.0 + 0.1 * k, [100 * (k + 1) + j for j in range(4)], session_id=sid))
    reqs.append(_blk(3.0, CTX, session_id="s", finish_reason="tool_calls"))
    reqs += [_blk(3.2 + 0.2 * k, [1000 + 20 * k + j for j in range(12)]) for k in range(8)]  # evicts CTX
    if resume_at is not None:
        reqs.append(_blk(resume_at, [*CTX, 11, 12], session_id="s"))
    reqs.append(_blk(9.0, [5000, 5001]))  # a last unrelated request: the stream runs past the wakes
    reqs.sort(key=lambda r: r.t)
    return reqs


def _run(name, reqs, cap=16):
    pol = make_policy(name, ReplaySettings())
    rec = run_policy(pol, reqs, cap, COST)
    return pol, rec


def test_gap_quantiles_wait_for_samples_and_read_the_learned_distribution():
    g = GapQuantiles()
    for x in range(MIN_SAMPLES - 1):
        g.add(True, float(x))
    assert g.quantiles(True) == []
    for x in (10.0, 20.0, 30.0, 40.0, 50.0, 60.0):
        g.add(True, x)
    qs = g.quantiles(True)
    assert qs == sorted(qs) and len(qs) == 3
    assert qs[0] < qs[1] < qs[2] <= 60.0
    assert g.quantiles(False) == []  # the kinds are learned apart


def test_blind_keeper_rewarms_at_learned_pause_and_beats_lru():
    reqs = _trace(5.0)
    lru = run_policy(make_policy("lru", ReplaySettings()), reqs, 16, COST)
    pol, rec = _run("oracle-keeper-blind", reqs)
    i = next(k for k, r in enumerate(reqs) if r.session_id == "s" and r.t == 5.0)
    assert lru.hit_blocks[i] == 0
    assert rec.hit_blocks[i] == len(CTX)  # re-warmed from the learned ~2 s pause, not the arrival time
    assert pol.extra()["sent"] >= 1
    assert pol.extra()["pauses_learned"]["tool"] >= MIN_SAMPLES


def test_blind_keeper_acts_at_the_same_times_whenever_the_session_resumes():
    # the arrival time of the resume is not an input: actions before the earlier resume coincide
    early, late = _trace(5.0), _trace(6.5)
    _, a = _run("oracle-keeper-blind", early)
    _, b = _run("oracle-keeper-blind", late)
    ta = [t for t, _ in a.action_jobs if t < 5.0]
    tb = [t for t, _ in b.action_jobs if t < 5.0]
    assert ta and ta == tb
    # the clairvoyant oracle moves its warm with the arrival
    _, oa = _run("oracle-keeper", early)
    _, ob = _run("oracle-keeper", late)
    assert [t for t, _ in oa.action_jobs] != [t for t, _ in ob.action_jobs]


def test_blind_keeper_knows_which_sessions_return_and_gap_keeper_does_not():
    reqs = _trace(None)  # session s never comes back
    blind, _ = _run("oracle-keeper-blind", reqs)
    keeper, _ = _run("gap-keeper", reqs)
    assert blind.extra()["sent"] == 0
    assert keeper.extra()["sent"] >= 1  # it keeps the context of a session that is gone


def test_tool_gap_keeper_keeps_only_sessions_paused_on_a_tool():
    tool = _trace(None)  # s paused on tool_calls and never returns: kept anyway (no future known)
    keeper, _ = _run("tool-gap-keeper", tool)
    assert keeper.extra()["sent"] >= 1
    # the same stream with every pause after a plain stop: gap-keeper keeps s, tool-gap-keeper not
    stop = [_blk(r.t, r.block_hashes, session_id=r.session_id, finish_reason="stop") for r in tool]
    plain, _ = _run("gap-keeper", stop)
    keeper2, _ = _run("tool-gap-keeper", stop)
    assert plain.extra()["sent"] >= 1
    assert keeper2.extra()["sent"] == 0
