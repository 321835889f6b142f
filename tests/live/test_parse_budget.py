"""The parse worker's time budget (issue 22, proxy/runtime/offload.py): a share of wall time, a
bucket of burst seconds, corrected by what each job really took."""

from __future__ import annotations

import asyncio

from proxy.runtime.offload import ParseOffload


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_budget_admits_only_its_share_of_time():
    clock = Clock()
    off = ParseOffload(8, share=0.25, burst_s=0.25, clock=clock)
    off.s_per_byte = 1e-8  # a 4 MiB body: ~42 ms of parse
    size = 4 << 20
    burst = sum(off.admit(size) for _ in range(100))
    assert burst == 5  # 0.25 s of bucket / 42 ms (the 6th would need 0.252 s)
    admitted = 0
    for _ in range(1000):  # 10 s of a sustained flood, one body every 10 ms
        clock.t += 0.01
        admitted += off.admit(size)
    assert abs(admitted * size * off.s_per_byte - 0.25 * 10.0) < 0.05  # 25% of the time, no more


def test_a_body_costlier_than_the_burst_needs_a_full_bucket_and_pays_its_debt():
    clock = Clock()
    off = ParseOffload(8, share=0.5, burst_s=0.1, clock=clock)
    off.s_per_byte = 1e-7  # 4 MiB: 0.42 s, over the 0.1 s bucket
    assert off.admit(4 << 20)
    clock.t += 0.5  # the debt (0.32 s) takes 0.64 s to repay at a 0.5 share
    assert not off.admit(1 << 10)
    clock.t += 0.4
    assert off.admit(1 << 10)


def test_no_budget_at_share_one_and_jobs_correct_the_estimate():
    off = ParseOffload(2, share=1.0)
    assert all(off.admit(64 << 20) for _ in range(50))

    async def run() -> list[object]:
        got: list[object] = []
        done = asyncio.Event()

        def finished(f: asyncio.Future[int]) -> None:
            got.append(f.result())
            if len(got) == 2:
                done.set()

        assert off.submit(sum, ((1, 2),), finished, size=1000)
        assert off.submit(sum, ((3, 4),), finished, size=1000)
        assert not off.submit(sum, ((5,),), finished, size=1000)  # the queue bound still holds
        await asyncio.wait_for(done.wait(), 10)
        return got

    assert sorted(asyncio.run(run())) == [3, 7]  # type: ignore[type-var]
    assert off.pending == 0 and off.busy_s > 0 and off.s_per_byte != 25e-9  # measured, estimate corrected
    off.close()
