"""Large request bodies are parsed and turned into views on a worker thread, not the event loop.

Why: the forwarder parses small JSON bodies inline (cheap), but a multi-megabyte body — 400k
messages, a 1 MB prompt — costs tens to hundreds of milliseconds of `json.loads` plus the canonical
view (canonical JSON + xxh3 over every block), and on the loop that stalls every other stream and
`/livez`. Here such a body goes to one worker thread behind a bounded queue: when the queue is full
the request is simply not learned from (counted), never delayed. Bodies over `max_body_bytes` are
not parsed at all (counted by the observer): the policy skips them and the bytes pass through.

One worker on purpose: the GIL means more threads would not parse faster, only hold it more often;
the point is that the loop gets the GIL back between the worker's bytecodes (`json.loads` of a body
at the cap holds it for one C call, which is why the cap exists).

A time budget on top of the queue (issue 22): the worker may be busy at most `parse_share` of the
wall time (a token bucket holding at most `parse_burst_s` seconds of work). While it parses, the
loop competes with it for the GIL (and on a loaded machine waits whenever the OS deschedules the
worker holding it): 8 concurrent 1-4 MiB bodies kept the worker busy all the time and `/livez`
p99 went from 11 to 224 ms. A body whose estimated parse time (its size times the measured
seconds per byte) does not fit the bucket is not learned from (counted, reason parse_budget);
the request itself is forwarded as always.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from proxy.core.fingerprint import view_from_openai

if TYPE_CHECKING:
    from proxy.core.view import RequestView
    from proxy.settings import Settings

T = TypeVar("T")
PARSE_SWITCH_INTERVAL_S = 0.001


@dataclass(frozen=True, slots=True)
class ObserveLimits:
    """How much request body the policy reads, and where (see `Settings.policy_*`)."""

    inline_parse_bytes: int = 256 * 1024  # bodies up to this are parsed on the loop
    max_body_bytes: int = 4 * 1024 * 1024  # bodies over this are not read by the policy at all
    offload_queue: int = 8  # large bodies waiting for the worker; more are skipped
    parse_share: float = 0.25  # of wall time the worker may spend parsing; 1 = no time budget
    parse_burst_s: float = 0.25  # seconds of parse work the budget can hold at once

    @classmethod
    def from_settings(cls, settings: Settings) -> ObserveLimits:
        return cls(
            int(settings.policy_inline_parse_bytes),
            int(settings.policy_max_body_bytes),
            int(settings.policy_offload_queue),
            float(settings.policy_parse_share),
            float(settings.policy_parse_burst_s),
        )


class ParseOffload:
    """A one-thread pool with a bounded number of jobs in flight; results come back on the loop."""

    def __init__(
        self, max_pending: int, share: float = 1.0, burst_s: float = 0.25, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.clock = clock
        self.max_pending = max_pending
        self.pending = 0
        self._pool: Executor | None = None
        self.share = min(1.0, max(0.0, share))
        self.burst_s = burst_s
        self._tokens = burst_s  # seconds of parse work available now
        self._refilled_at: float | None = None
        self.s_per_byte = 25e-9  # measured (EWMA of the worker's wall time per body byte)
        self.busy_s = 0.0  # worker wall time, all jobs (for the share actually used)

    def admit(self, size: int) -> bool:
        """Whether a body of ``size`` bytes fits the time budget now (False: skip it). Charges the
        estimate; the job's measured time corrects it when it ends."""
        if self.share >= 1.0:
            return True
        now = self.clock()
        if self._refilled_at is not None:
            self._tokens = min(self.burst_s, self._tokens + (now - self._refilled_at) * self.share)
        self._refilled_at = now
        est = size * self.s_per_byte
        if self._tokens < min(est, self.burst_s):  # (a body costlier than the whole burst: a full bucket)
            return False
        self._tokens -= est
        return True

    def _measured(self, size: int, wall: float, charged: float) -> None:
        """Back on the loop: the job took ``wall`` seconds; correct the charge and the estimate."""
        self.busy_s += wall
        if self.share < 1.0:
            self._tokens -= wall - charged
        if size > 0:
            self.s_per_byte += 0.2 * (wall / size - self.s_per_byte)

    def submit(
        self, fn: Callable[..., T], args: tuple[object, ...], done: Callable[[asyncio.Future[T]], None], size: int = 0
    ) -> bool:
        """Run ``fn(*args)`` on the worker, then ``done(future)`` on the loop. False (nothing
        scheduled) when the queue is full or there is no running loop. ``size``: the body's bytes,
        already admitted by ``admit`` (its time is measured and corrects the budget)."""
        if self.pending >= self.max_pending:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._pool is None:
            self._pool = self._make_pool()
        self.pending += 1
        charged = size * self.s_per_byte
        timing = [0.0]

        def timed() -> T:
            t0 = time.monotonic()
            try:
                return fn(*args)
            finally:
                timing[0] = time.monotonic() - t0

        fut = loop.run_in_executor(self._pool, timed)

        def finished(f: asyncio.Future[T]) -> None:
            self.pending -= 1
            self._measured(size, timing[0], charged)
            done(f)

        fut.add_done_callback(finished)
        return True

    def _make_pool(self) -> Executor:
        # While the worker runs Python code, the loop waits for the GIL up to the switch interval at
        # each wake-up (CPython's default: 5 ms; a `/livez` needs several): 1 ms bounds that wait.
        # Without a second busy thread nothing switches, so the request path does not pay for it.
        if sys.getswitchinterval() > PARSE_SWITCH_INTERVAL_S:
            sys.setswitchinterval(PARSE_SWITCH_INTERVAL_S)
        return ThreadPoolExecutor(1, thread_name_prefix="cachescout-parse")

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def view_from_openai_bytes(
    path: str, body: bytes, headers: Mapping[str, str], block_chars: int, chars_per_token: float
) -> RequestView | None:
    """The worker thread's job: parse a large body and build its view (None when not a chat/completions body)."""
    return view_from_openai(path, body, headers, block_chars=block_chars, chars_per_token=chars_per_token)
