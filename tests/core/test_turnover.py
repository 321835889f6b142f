"""The cache turnover rates (core/turnover.py): a pause lowers the insert rate while it lasts."""

from proxy.core.turnover import Turnover


def _burst() -> Turnover:
    t = Turnover()
    t.update(0.0, 0, 0, 0)
    t.update(1.0, 3000, 3, 0)  # 3,000 tokens/s for one second
    return t


def test_a_pause_lowers_the_insert_rate_as_of_now():
    t = _burst()
    assert t.insert_rate == 3000
    assert t.insert_rate_at(1.5, 3000) == 3000  # under a second: the last window stands
    at_3 = t.insert_rate_at(3.0, 3000)
    at_5 = t.insert_rate_at(5.0, 3000)
    assert at_3 is not None and at_5 is not None
    assert at_5 < at_3 < 3000  # the longer the silence, the lower
    assert at_5 < 0.3 * 3000
    assert t.insert_rate_at(None, 3000) == 3000  # no clock: the committed EWMA


def test_reading_as_of_now_agrees_with_the_next_update():
    t = _burst()
    expect = t.insert_rate_at(4.0, 3600)
    t.update(4.0, 3600, 4, 0)
    assert t.insert_rate == expect


def test_a_window_of_one_second_weighs_as_before():
    t = _burst()
    t.update(2.0, 4000, 4, 0)  # 1,000 tokens/s for one second
    assert abs(t.insert_rate - (0.7 * 3000 + 0.3 * 1000)) < 1e-9
