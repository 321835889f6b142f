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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from proxy.core.fingerprint import view_from_openai

if TYPE_CHECKING:
    from proxy.core.view import RequestView
    from proxy.settings import Settings

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ObserveLimits:
    """How much request body the policy reads, and where (see `Settings.policy_*`)."""

    inline_parse_bytes: int = 256 * 1024  # bodies up to this are parsed on the loop
    max_body_bytes: int = 4 * 1024 * 1024  # bodies over this are not read by the policy at all
    offload_queue: int = 8  # large bodies waiting for the worker; more are skipped

    @classmethod
    def from_settings(cls, settings: Settings) -> ObserveLimits:
        return cls(
            int(settings.policy_inline_parse_bytes),
            int(settings.policy_max_body_bytes),
            int(settings.policy_offload_queue),
        )


class ParseOffload:
    """A one-thread pool with a bounded number of jobs in flight; results come back on the loop."""

    def __init__(self, max_pending: int) -> None:
        self.max_pending = max_pending
        self.pending = 0
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable[..., T], args: tuple[object, ...], done: Callable[[asyncio.Future[T]], None]) -> bool:
        """Run ``fn(*args)`` on the worker, then ``done(future)`` on the loop. False (nothing
        scheduled) when the queue is full or there is no running loop."""
        if self.pending >= self.max_pending:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="cachescout-parse")
        self.pending += 1
        fut = loop.run_in_executor(self._pool, fn, *args)

        def finished(f: asyncio.Future[T]) -> None:
            self.pending -= 1
            done(f)

        fut.add_done_callback(finished)
        return True

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def view_from_openai_bytes(
    path: str, body: bytes, headers: Mapping[str, str], block_chars: int, chars_per_token: float
) -> RequestView | None:
    """The worker thread's job: parse a large body and build its view (None when not a chat/completions body)."""
    return view_from_openai(path, body, headers, block_chars=block_chars, chars_per_token=chars_per_token)
