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
import gc
import json
import re
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
    """The worker thread's job: parse a large body and build its view (None when not a
    chat/completions body). The body is parsed in pieces (`loads_in_pieces`), and the cyclic
    garbage collector waits while the job runs (`gc_paused`): neither a single `json.loads` of a
    40k-item body (55-68 ms) nor a full collection its 40k new objects trigger (50 ms) can then
    hold the GIL against the event loop (issue 39)."""
    with gc_paused():
        try:
            parsed = loads_in_pieces(body)
        except (ValueError, RecursionError, UnicodeError):
            return None
        return view_from_openai(path, parsed, headers, block_chars=block_chars, chars_per_token=chars_per_token)


_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
PIECE_SLICES = (1024, 16 * 1024)  # a container shorter than these is decoded in one call (well under 1 ms)


def loads_in_pieces(body: bytes | str) -> object:
    """`json.loads(body)`, the same result (same decoder, same errors for invalid JSON), but one C
    call per scalar value and per container deeper than `PIECE_DEPTH` instead of one C call for
    the whole body. Why: the worker thread holds the GIL for the whole of a C call, so the event
    loop (`/livez`, every other request) waited out each `json.loads`: 14 ms for a 4 MiB chat
    body, 55-68 ms for a 3 MB Responses/Messages body of 40k items. Between two calls here the
    interpreter can hand the GIL over (the switch interval is 1 ms while the worker runs). The
    longest call left is the longest single string (a 3.5 MB prompt: a few ms of scanning)."""
    if isinstance(body, bytes | bytearray):
        text = bytes(body).decode(json.detect_encoding(body), "surrogatepass")
    else:
        text = body
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    value, end = _piece(text, _WS.match(text, 0).end(), 0)  # type: ignore[union-attr]
    end = _WS.match(text, end).end()  # type: ignore[union-attr]
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _piece(s: str, i: int, depth: int) -> tuple[object, int]:
    """The JSON value starting at ``s[i]`` (no leading whitespace) and the index after it."""
    c = s[i : i + 1]
    if c not in ("{", "["):
        return _DECODER.raw_decode(s, i)
    if depth > 0:
        # a container that ends within a slice is decoded in one short call (a container is
        # self-delimiting, so decoding it from a slice gives the same value); a longer one fails
        # there and is taken apart below. Two sizes: a short slice for the many small items
        # (copying 16 KiB for each of 40k 60-byte parts would cost more than parsing them)
        for size in PIECE_SLICES:
            if i + size >= len(s):
                return _DECODER.raw_decode(s, i)  # the rest of the text is short: one short call
            try:
                v, n = _DECODER.raw_decode(s[i : i + size])
                return v, i + n
            except json.JSONDecodeError:
                pass
    i = _skip_ws(s, i + 1)
    if c == "[":
        out: list[object] = []
        if s[i : i + 1] == "]":
            return out, i + 1
        while True:
            v, i = _piece(s, i, depth + 1)
            out.append(v)
            i = _skip_ws(s, i)
            sep = s[i : i + 1]
            if sep == "]":
                return out, i + 1
            if sep != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", s, i)
            i = _skip_ws(s, i + 1)
    obj: dict[str, object] = {}
    if s[i : i + 1] == "}":
        return obj, i + 1
    while True:
        if s[i : i + 1] != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", s, i)
        key, i = _DECODER.raw_decode(s, i)
        i = _skip_ws(s, i)
        if s[i : i + 1] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", s, i)
        v, i = _piece(s, _skip_ws(s, i + 1), depth + 1)
        obj[key] = v
        i = _skip_ws(s, i)
        sep = s[i : i + 1]
        if sep == "}":
            return obj, i + 1
        if sep != ",":
            raise json.JSONDecodeError("Expecting ',' delimiter", s, i)
        i = _skip_ws(s, i + 1)


def _skip_ws(s: str, i: int) -> int:
    """The index of the first non-whitespace character at or after ``i`` (compact JSON: none)."""
    if s[i : i + 1] in _WS_CHARS:
        return _WS.match(s, i).end()  # type: ignore[union-attr]
    return i


_WS_CHARS = frozenset(" \t\n\r")


_gc_pauses = 0  # parse jobs running now with the collector paused (one worker: 0 or 1)


class gc_paused:
    """Automatic cyclic GC off while a parse job runs, back on (if it was on) when the last ends.

    A parse allocates tens of thousands of containers (a 40k-item body: 40k+ dicts), which
    triggers young collections and, every hundred of them, a full one over the whole heap: ~50 ms
    holding the GIL, on the worker thread, against the loop. A parsed body is acyclic (JSON has
    no cycles) and the view's objects are freed by reference counting, so nothing is lost by
    waiting; the collector runs as usual once the job ends."""

    def __enter__(self) -> None:
        global _gc_pauses
        if _gc_pauses == 0:
            self.was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1

    def __exit__(self, *exc: object) -> None:
        global _gc_pauses
        _gc_pauses -= 1
        if _gc_pauses == 0 and getattr(self, "was_enabled", False):
            gc.enable()
