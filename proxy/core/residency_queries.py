"""The residency shadow's read side: what the planner asks of it (``ResidencyShadow`` in
residency.py is the class; this mixin holds its queries).

Why apart: the shadow's write side (feeding, eviction, compaction, engine truth) and the verdicts
read from it change for different reasons, and each half stays under the core's module cap. The
queries read the same state the write side keeps (declared below); ``near_eviction`` advances the
tail-zone cursor, which is amortised bookkeeping, not a change of what is resident.
"""

from __future__ import annotations

from collections.abc import Callable, MutableSequence, Sequence

from .session_residency import SessionResidency
from .turnover import Turnover


class ShadowQueries:
    capacity_tokens: int
    near_eviction_fraction: float
    stride: int
    horizon_s: float
    rates: Turnover
    _stamp: dict[int, int]
    _tok: dict[int, int]
    _qs: MutableSequence[int]  # array('q') in ResidencyShadow: stamps without int objects
    _qh: list[int]
    _head: int
    _cur: int
    _zone_tok: int
    _seq: int
    _used: int
    _inserted: int
    sessions: SessionResidency
    engine_session_of: Callable[[tuple[str, str]], str | None]

    # --- queries ----------------------------------------------------------------------------
    def resident_prefix(self, hashes: Sequence[int]) -> int:
        """Leading blocks of ``hashes`` the shadow holds (to the last tracked resident block)."""
        blocks = self._stamp
        n = len(hashes)
        k = self.stride
        if k <= 1:
            i = 0
            for h in hashes:
                if h not in blocks:
                    break
                i += 1
            return i
        good = 0
        for i in range(k - 1, n, k):
            if hashes[i] not in blocks:
                return good
            good = i + 1
        if n and hashes[n - 1] in blocks:  # an anchor's tracked last block
            return n
        return good

    def fully_resident(self, hashes: Sequence[int]) -> bool:
        """Every tracked block of this prefix is held (exact when stride is 1)."""
        return self.resident_prefix(hashes) > len(hashes) - max(1, self.stride)

    def resident_prefix_tokens(self, hashes: Sequence[int], tokens: Sequence[int]) -> int:
        n = self.resident_prefix(hashes)
        return sum(tokens[:n])

    def near_eviction(self, hashes: Sequence[int]) -> bool:
        """True when a resident prefix's deepest block lies in the oldest part of the cache
        (``zone_tokens``). The deepest block is evicted first, so it (and the first tracked
        block) is what is checked."""
        if not hashes or self.capacity_tokens <= 0:
            return False
        zone = self.zone_tokens()
        if self._used < self.capacity_tokens - zone:
            return False  # cache not full enough for anything to be near the tail
        self._advance(zone - max(0, self.capacity_tokens - self._used))  # free room also protects
        qs = self._qs
        cs = qs[self._cur] if self._cur < len(qs) else self._seq + 1
        stamps = self._stamp
        for h in (hashes[-1], hashes[min(max(1, self.stride), len(hashes)) - 1]):
            st = stamps.get(h)
            if st is not None and st < cs:
                return True
        return False

    def verdict(self, hashes: Sequence[int]) -> tuple[int, bool, bool]:
        """(resident_prefix, fully_resident, near_eviction if fully resident else False) in one
        call: what the planner asks of every candidate. Same answers as the three methods (the
        residency tests pin that); inlined because it runs for most requests."""
        blocks = self._stamp
        n = len(hashes)
        k = self.stride
        if k <= 1:
            resident = 0
            for h in hashes:
                if h not in blocks:
                    break
                resident += 1  # noqa: SIM113 - the leading run only: stops at the first miss
            k = 1
        else:
            resident = 0
            for i in range(k - 1, n, k):
                if hashes[i] not in blocks:
                    break
                resident = i + 1
            else:
                if n and hashes[n - 1] in blocks:
                    resident = n
        if resident <= n - k:
            return resident, False, False
        return resident, True, self.near_eviction(hashes)

    def session_blocks(self, session: tuple[str, str]) -> frozenset[object] | None:
        """The engine blocks conversation ``session`` stored that are resident now, exactly (from
        the engine's KV events); None: no engine truth for it (the shadow's estimate stands)."""
        sid = self.engine_session_of(session)
        return self.sessions.blocks(sid) if sid is not None else None

    def session_verdict(
        self, session: tuple[str, str], hashes: Sequence[int], tokens: Sequence[int], verdict: tuple[int, bool, bool]
    ) -> tuple[int, bool, bool]:
        """``verdict`` (the shadow's, for a conversation's context ``hashes``) where the engine's
        truth about the conversation's own blocks replaces the estimate:
        - some of its blocks were evicted since it last stored them: the context is not fully
          resident, and (the engine evicts a chain's deepest blocks first) its last that-many tokens
          are missing;
        - every block it stored is resident: its own tail is there, so the context is fully resident
          when the shadow holds the part before that tail (a shared prefix another session stored).
        No truth for the conversation: ``verdict`` unchanged. Tokens in the views' units."""
        sid = self.engine_session_of(session)
        truth = self.sessions.tokens(sid) if sid is not None else None
        if truth is None or not hashes:
            return verdict
        resident, full = verdict[0], verdict[1]
        have, gone = truth
        n = len(hashes)
        if gone > 0:
            i, left = n, gone
            while i > 0 and left > 0:
                i -= 1
                left -= tokens[i]
            return min(resident, i), False, False
        if full or have <= 0:
            return verdict
        i, left = n, have
        while i > 0 and left > 0:
            i -= 1
            left -= tokens[i]
        if resident >= i:
            return n, True, self.near_eviction(hashes)
        return verdict

    def _advance(self, budget: float) -> None:
        """Move the zone cursor until the live entries behind it hold ``budget`` tokens."""
        if self._zone_tok > budget * 1.5 + 1:
            self._cur, self._zone_tok = self._head, 0  # the zone shrank a lot: walk again
        qs, qh = self._qs, self._qh
        stamps, toks = self._stamp, self._tok
        cur, tok, n = self._cur, self._zone_tok, len(qs)
        while tok < budget and cur < n:
            h = qh[cur]
            if stamps.get(h) == qs[cur]:
                tok += toks[h]
            cur += 1
        self._cur, self._zone_tok = cur, tok

    def zone_tokens(self) -> float:
        """Size of the tail zone: a fixed share of capacity, or (with a horizon) what the client
        traffic will insert within ``horizon_s``, whichever is larger, at most the capacity."""
        cap = self.capacity_tokens
        zone = self.near_eviction_fraction * cap
        if self.horizon_s > 0 and self.rates.insert_rate:
            zone = min(float(cap), max(zone, self.rates.insert_rate * self.horizon_s))
        return zone

    def safe_until(self) -> float:
        """A "resident and not near eviction" verdict stays valid until this many tokens were
        inserted (a quarter of the tail zone from now); the planner memoises verdicts with it."""
        if self.capacity_tokens <= 0:
            return float("inf")
        return self._inserted + self.zone_tokens() / 4
