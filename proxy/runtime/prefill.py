"""Measured prefill rate of the engine, from what the proxy already sees.

Why: the core's warmup budget (`warmup_tokens_per_s`) and its "can a warm finish before the demand"
test (`prefill_tokens_per_s`) are fixed numbers by default, and a budget that is safe on an H100
running an 8B model floods a CPU engine or a 70B model. The proxy can measure the rate instead:
- the engine's own prefill time (vLLM `vllm:request_prefill_time_seconds_sum`, with prompt tokens
  minus prefix-cache hits as the tokens actually computed) — preferred when the engine reports it;
- otherwise streamed client requests: computed tokens (prompt − cached) / time to first token,
  and the proxy's own `max_tokens=1` warmups: computed tokens / request duration. Samples of
  requests that started while no other request of the proxy was in flight ("alone") are kept apart
  and preferred: they carry the least queueing.
The client and warmup samples include queueing and one decode step, so they *under*-estimate the
rate under load: the budget errs on the safe side. Samples below `MIN_TOKENS` computed tokens are
dominated by per-request overhead and ignored.
"""

from __future__ import annotations

from collections import deque

MIN_TOKENS = 64  # computed tokens below this measure overhead, not prefill
MIN_TOTAL_TOKENS = 1024  # no estimate until this many computed tokens were timed
WINDOW = 64  # samples kept per source (the regime can change: model swap, load)


class PrefillRate:
    def __init__(self) -> None:
        self._engine: deque[tuple[float, float]] = deque(maxlen=WINDOW)
        self._observed: deque[tuple[float, float]] = deque(maxlen=WINDOW)
        self._alone: deque[tuple[float, float]] = deque(maxlen=WINDOW)
        self._prev: tuple[float, float] | None = None  # (computed tokens, prefill seconds) cumulative

    def add_request(self, computed_tokens: float, seconds: float, alone: bool = False) -> None:
        """A client TTFT or a warmup's duration, with the tokens the engine computed for it; `alone`:
        nothing else of the proxy's was in flight when it started."""
        if computed_tokens >= MIN_TOKENS and seconds > 0:
            self._observed.append((float(computed_tokens), float(seconds)))
            if alone:
                self._alone.append((float(computed_tokens), float(seconds)))

    def add_engine_totals(self, computed_tokens: float, prefill_seconds: float) -> None:
        """Cumulative engine counters from a scrape; a window sample is their change since the last."""
        prev, self._prev = self._prev, (computed_tokens, prefill_seconds)
        if prev is None:
            return
        dt, ds = computed_tokens - prev[0], prefill_seconds - prev[1]
        if ds > 0 and dt >= MIN_TOKENS:  # a counter reset gives dt < 0: skipped
            self._engine.append((dt, ds))

    @property
    def source(self) -> str | None:
        for name, window in self._windows():
            if sum(t for t, _ in window) >= MIN_TOTAL_TOKENS:
                return name
        return None

    def _windows(self) -> tuple[tuple[str, deque], ...]:
        return (("engine", self._engine), ("alone", self._alone), ("observed", self._observed))

    def tokens_per_s(self) -> float | None:
        """Σ tokens / Σ seconds over the preferred source's window; None until enough was timed."""
        src = self.source
        if src is None:
            return None
        window = dict(self._windows())[src]
        tokens = sum(t for t, _ in window)
        seconds = sum(s for _, s in window)
        return tokens / seconds if seconds > 0 else None
