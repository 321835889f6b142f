"""The demo's progress lines on stderr: one bar per phase (`Progress`), or both phases side by side
when they run at once (`DualProgress`).

Why apart from `cli.py`: drawing is the demo's only terminal I/O besides the final table; on a
terminal it redraws one line in place, elsewhere (CI logs, pipes) it prints a line per tenth of
the run so a log stays short.
"""

from __future__ import annotations

import sys
import time


class Progress:
    """A `\\r` progress bar on a terminal; on a pipe or log file (not a TTY), one line per 10%."""

    def __init__(self, label: str, total: int, enabled: bool, tty: bool | None = None) -> None:
        self.label, self.total, self.n, self.enabled = label, max(1, total), 0, enabled
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.t0 = time.perf_counter()
        self._last = 0.0
        self._decile = 0

    def tick(self) -> None:
        self.n += 1
        now = time.perf_counter()
        if not self.enabled:
            return
        if not self.tty:
            self._decile = _line_if_decile(self.label, self.n, self.total, self._decile, now - self.t0)
        elif now - self._last > 0.1 or self.n >= self.total:
            self._last = now
            done = min(1.0, self.n / self.total)
            bar = "#" * int(30 * done) + "." * (30 - int(30 * done))
            sys.stderr.write(f"\r  {self.label:<10} [{bar}] {self.n:4d} requests  {now - self.t0:5.1f}s")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write(
                f"\r  {self.label:<10} [{'#' * 30}] {self.n:4d} requests  {time.perf_counter() - self.t0:5.1f}s\n"
            )
            sys.stderr.flush()


def _line_if_decile(label: str, n: int, total: int, printed: int, elapsed: float) -> int:
    """Print `label 30% (48/160 requests) 12.3s` when n crosses the next 10% step; returns the step."""
    decile = min(10, 10 * n // max(1, total))
    if decile > printed:
        sys.stderr.write(f"  {label:<10} {10 * decile:3d}% ({n}/{total} requests) {elapsed:5.1f}s\n")
        sys.stderr.flush()
        return decile
    return printed


class DualProgress:
    """One line for two phases running at once (a TTY); otherwise a line per phase per 10%."""

    def __init__(self, bars: dict[str, Progress], enabled: bool, tty: bool | None = None) -> None:
        self.bars = bars
        self.counts = dict.fromkeys(bars, 0)
        self.deciles = dict.fromkeys(bars, 0)
        self.total = next(iter(bars.values())).total
        self.enabled = enabled
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.t0 = time.perf_counter()
        self._last = 0.0

    def tick(self, name: str) -> None:
        self.counts[name] += 1
        self.bars[name].tick()  # sequential mode: the per-phase bar draws
        now = time.perf_counter()
        if not self.enabled:
            return
        if not self.tty:
            self.deciles[name] = _line_if_decile(name, self.counts[name], self.total, self.deciles[name], now - self.t0)
        elif now - self._last > 0.1:
            self._last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        parts = []
        for name, n in self.counts.items():
            done = min(1.0, n / self.total)
            parts.append(f"{name} [{'#' * int(20 * done)}{'.' * (20 - int(20 * done))}] {n:4d}")
        sys.stderr.write("\r  " + "   ".join(parts) + f"   {now - self.t0:5.1f}s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self._draw(time.perf_counter())
            sys.stderr.write("\n")
            sys.stderr.flush()
