"""The replay report says why scout-proxy did not act: the planner's top skip reasons (issue 26 item 2)."""

from proxy.replay.report import markdown
from proxy.replay.runner import ReplaySettings, replay
from proxy.replay.scout import top_skips
from proxy.replay.workloads import generate, preset


def test_top_skips_orders_by_count_and_drops_zeros():
    assert top_skips({"a": 0, "b": 3, "c": 7, "d": 3}, n=2) == {"c": 7, "b": 3}
    assert list(top_skips({"x": 1, "y": 0})) == ["x"]


def test_report_prints_the_reasons_the_planner_gave():
    spec = preset("swebench", sessions=6, seed=1)
    res = replay(generate(spec), [200], ["scout-proxy"], ReplaySettings(block_size=spec.block_size))
    s = res["capacities"][0]["policies"]["scout-proxy"]
    why = s["extra"]["top_skips"]
    assert why, s["extra"]  # a replay of a few sessions always skips some candidates
    counts = list(why.values())
    assert counts == sorted(counts, reverse=True) and all(v > 0 for v in counts)
    md = markdown(res, {})
    assert "scout-proxy: why candidates were not acted on" in md
    assert f"{next(iter(why))} {counts[0]}" in md
