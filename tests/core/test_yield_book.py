"""The yield rule shared by live and replay (core/yield_book.py)."""

from proxy.core.action_payload import ActionPayload
from proxy.core.actions import Action
from proxy.core.residency import ResidencyShadow
from proxy.core.view import view_from_blocks
from proxy.core.yield_book import YieldBook

HASHES = tuple(range(1, 9))  # 8 blocks x 16 tokens
TOKENS = (16,) * 8


def _action(kind: str = "touch", hashes: tuple[int, ...] = HASHES) -> Action:
    return Action(kind, "transition", "t", "a1", hashes, 16 * len(hashes), ActionPayload("x"), 0, 0.0, 2.0)


def _shadow(capacity: int = 1024) -> ResidencyShadow:
    return ResidencyShadow(capacity_tokens=capacity, stride=1)


def test_a_warm_of_an_evicted_prefix_saves_all_it_made():
    book, res = YieldBook(), _shadow()
    assert book.charge(_action("warm"), res, prompt_tokens=128, cached_tokens=0, computed_tokens=128) == 128
    assert book.credit("t", HASHES[-1], 128, prompt_tokens=200, cached_tokens=128, residency=res) == 128
    assert book.credit("t", HASHES[-1], 128, 200, 128, res) is None  # credited once


def test_a_touch_of_a_prefix_that_would_have_stayed_saves_nothing():
    book, res = YieldBook(), _shadow()
    res.on_forward(view_from_blocks("t", HASHES, TOKENS), 0.0)  # resident and far from eviction
    assert book.charge(_action(), res, prompt_tokens=128, cached_tokens=128, computed_tokens=1) == 1
    assert book.credit("t", HASHES[-1], 128, 200, 128, res) == 0


def test_a_touch_saves_what_turnover_would_have_evicted():
    book, res = YieldBook(), _shadow(capacity=256)
    res.on_forward(view_from_blocks("t", HASHES, TOKENS), 0.0)
    book.charge(_action(), res, prompt_tokens=128, cached_tokens=128, computed_tokens=1)
    other = tuple(range(100, 140))  # 640 tokens inserted since: more than the prefix's remaining life
    res.on_forward(view_from_blocks("t", other, (16,) * len(other)), 1.0)
    assert book.credit("t", HASHES[-1], 128, 200, 128, res) == 128


def test_only_a_confirmed_hit_is_credited():
    book, res = YieldBook(), _shadow()
    book.charge(_action("warm"), res, prompt_tokens=128, cached_tokens=0, computed_tokens=128)
    assert book.credit("t", HASHES[-1], 128, 200, 64, res) is None  # 64 < 80% of 128
    assert book.credit("t", 999, 128, 200, 128, res) is None  # no such action


def test_bounded():
    book, res = YieldBook(max_entries=3), _shadow()
    for k in range(10):
        book.charge(_action("warm", (1000 + k,)), res, 16, 0, 16)
    assert len(book) == 3
    assert book.credit("t", 1000, 16, 16, 16, res) is None  # forgotten
    assert book.credit("t", 1009, 16, 16, 16, res) == 16


def test_an_action_is_contended_only_if_client_traffic_overlapped_its_run():
    from proxy.core.yield_book import ran_alongside_traffic

    sent = 10.0
    # planned during a burst, sent after its last request ended: it delayed nobody
    assert not ran_alongside_traffic(sent, inflight_now=False, last_start=9.0, last_end=9.5)
    assert ran_alongside_traffic(sent, inflight_now=True, last_start=9.0, last_end=9.5)  # still running
    assert ran_alongside_traffic(sent, inflight_now=False, last_start=10.2, last_end=10.4)  # came and went
    assert ran_alongside_traffic(sent, inflight_now=False, last_start=9.0, last_end=10.1)  # ran at the send
