"""Lineages of text views: which earlier call a structureless prompt goes on from, and how often
such a lineage resumes after its call ended (issue 23 item 5).

Why: a text trace (``lmcache``, a raw ``/v1/completions`` prompt, a block trace) has no chat view:
no history to compare, no marked anchor, no finish reason. Sessions then follow the explicit id,
and real ids name a *run* (one LangGraph thread over a supervisor and parallel researchers; one id
over 48 terminal tasks): every call of the run lands in one session whose latest prompt is
whatever ran last, so a researcher's next call, which extends that researcher's previous one, is
nobody's resume (measured: one ODR run -> 1 session of 28 calls, no resume seen, scout-proxy = LRU).

A lineage here is found by continuity alone, never by the id: a text call belongs to the lineage
whose latest call it shares the most blocks with *beyond the floor* (the agent's anchor, or what
other sources share when no agent is known: ``AgentRegistry.shared_depth``). Two shapes:

- append-only (a researcher's tool rounds): the call extends the lineage's latest call; its next
  call is expected to re-read all of this one;
- re-rendered (a terminal agent: template + task + the current screen): the call shares the
  lineage's task prefix and not the screen; its next call is expected to re-read the shared part.

``expect`` is what the next call should re-read, so it is what a resume keeps. A resume is a call
that joins a lineage whose previous call has ended: its gap (end -> this call) is learned per
tenant, and the share of ended calls that were resumed, split by first call / later calls (a
researcher that resumed once usually resumes again; a one-off prompt never does). The planner's
``LineageResume`` source (plan_lineage.py) prices a paused lineage with them.

Bounded: at most ``MAX_LINEAGES`` lineages (least recently active dropped), each indexed by at most
``MAX_KEYS`` of its latest call's hashes (every ``STRIDE``-th position beyond the floor, and the
last), so a lookup walks at most len/STRIDE + 1 dict entries. Chains are the views' own tuples
(shared, not copied). Pure: explicit ``now``, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from .sessions import common_prefix
from .survival import continuation_probability, median_gap

MAX_LINEAGES = 128
MAX_KEYS = 64
STRIDE = 4
MAX_TENANTS = 64
FIRST, LATER = 0, 1  # a lineage's pause after its first call / after a resume


@dataclass(slots=True, eq=False)
class Lineage:
    lid: int
    tenant: str
    last: tuple[int, ...]  # its latest call's chain (what the next call is compared with)
    floor: int  # blocks of that call shared with other sources (never a lineage's own)
    expect: tuple[int, ...]  # what its next call should re-read (a prefix of ``last``)
    expect_tokens: tuple[int, ...]
    payload: object  # the latest call's context payload (a warm re-sends it)
    calls: int = 1
    inflight: int = 0
    last_end: float | None = None
    keys: tuple[int, ...] = ()


@dataclass(slots=True)
class TenantStats:
    gaps: deque[float]
    pauses: list[int]  # [FIRST, LATER] ended calls
    resumes: list[int]  # [FIRST, LATER] of those, resumed


class LineageBook:
    def __init__(self, gap_samples: int = 16) -> None:
        self.lineages: OrderedDict[int, Lineage] = OrderedDict()  # activity order
        self._index: dict[int, int] = {}  # hash -> lineage id
        self._pending: OrderedDict[int, int] = OrderedDict()  # request id -> lineage id
        self.paused: dict[int, None] = {}  # lineages whose call ended since the planner last looked
        self.stats: OrderedDict[str, TenantStats] = OrderedDict()
        self._gap_samples = gap_samples
        self._seq = 0
        self.resumes = 0  # calls that resumed a paused lineage (a measurement)

    def __len__(self) -> int:
        return len(self.lineages)

    def tenant(self, tenant: str) -> TenantStats:
        st = self.stats.get(tenant)
        if st is None:
            st = self.stats[tenant] = TenantStats(deque(maxlen=self._gap_samples), [0, 0], [0, 0])
            if len(self.stats) > MAX_TENANTS:
                self.stats.popitem(last=False)
        return st

    def _find(self, tenant: str, hashes: tuple[int, ...], floor: int) -> tuple[Lineage, int] | None:
        """The lineage whose latest call ``hashes`` shares the most beyond ``floor`` with (deepest
        indexed position first), and that depth."""
        get, lineages = self._index.get, self.lineages
        n = len(hashes)
        j = n - 2 - (n - 2 - (STRIDE - 1)) % STRIDE  # the deepest indexed position below the last
        for i in (n - 1, *range(j, floor - 1, -STRIDE)):
            lid = get(hashes[i])
            if lid is not None:
                ln = lineages.get(lid)
                if ln is not None and ln.tenant == tenant:
                    d = common_prefix(hashes, ln.last)
                    if d > max(floor, ln.floor):
                        return ln, d
        return None

    def on_request(
        self,
        rid: int,
        tenant: str,
        hashes: tuple[int, ...],
        tokens: tuple[int, ...],
        floor: int,
        payload: object,
        now: float,
    ) -> int | None:
        """A text call: join (or start) its lineage. Returns the last hash of what the lineage
        expected before this call (what a resume action kept: its conversion key), else None."""
        if len(hashes) <= floor:
            return None
        found = self._find(tenant, hashes, floor)
        kept: int | None = None
        if found is None:
            self._seq += 1
            ln = Lineage(self._seq, tenant, hashes, floor, hashes, tokens, payload)
            self.lineages[ln.lid] = ln
            if len(self.lineages) > MAX_LINEAGES:
                self._drop(next(iter(self.lineages.values())))
        else:
            ln, d = found
            kept = ln.expect[-1] if ln.expect else None
            if ln.inflight == 0 and ln.last_end is not None:  # a resume after a pause
                st = self.tenant(tenant)
                st.gaps.append(max(0.0, now - ln.last_end))
                st.resumes[FIRST if ln.calls == 1 else LATER] += 1
                self.resumes += 1
            # append-only: the next call re-reads all of this one; re-rendered: the shared part
            # (a text view's partial last block is re-cut when the prompt grows: one block of slack)
            n = len(hashes) if d >= len(ln.last) - 1 else d
            ln.last, ln.floor, ln.payload = hashes, floor, payload
            ln.expect, ln.expect_tokens = hashes[:n], tokens[:n]
            ln.calls += 1
            self.lineages.move_to_end(ln.lid)
            self.paused.pop(ln.lid, None)
        ln.inflight += 1
        self._reindex(ln)
        self._pending[rid] = ln.lid
        while len(self._pending) > 4 * MAX_LINEAGES:
            self._pending.popitem(last=False)
        return kept

    def on_response(self, rid: int, now: float) -> None:
        lid = self._pending.pop(rid, None)
        ln = self.lineages.get(lid) if lid is not None else None
        if ln is None:
            return
        ln.inflight = max(0, ln.inflight - 1)
        if ln.inflight == 0:
            ln.last_end = now
            self.tenant(ln.tenant).pauses[FIRST if ln.calls == 1 else LATER] += 1
            self.paused[ln.lid] = None
            if len(self.paused) > MAX_LINEAGES:
                self.paused.pop(next(iter(self.paused)))

    def rate(self, ln: Lineage, prior: float, min_samples: int) -> float:
        """The share of pauses like its own (after a first call / after a resume) that were resumed;
        ``prior`` until ``min_samples`` of them ended."""
        st = self.stats.get(ln.tenant)
        if st is None:
            return prior
        k = FIRST if ln.calls == 1 else LATER
        n = st.pauses[k]
        return st.resumes[k] / n if n >= min_samples else prior

    def any_likely(self, prior: float, min_samples: int, min_p: float) -> bool:
        """Does any tenant's kind of pause resume with at least ``min_p`` (before the timing)?
        (A lineage nobody has seen a pause of yet is at ``prior``.)"""
        if prior >= min_p:
            return True
        for st in self.stats.values():
            for k in (FIRST, LATER):
                if st.pauses[k] >= min_samples and st.resumes[k] >= min_p * st.pauses[k]:
                    return True
        return False

    def probability(self, ln: Lineage, now: float, horizon: float, prior: float, min_samples: int) -> float:
        """P(its next call comes within ``horizon``): ``rate`` times the learned gaps' chance of
        one within the horizon, given how long it has been paused."""
        rate = self.rate(ln, prior, min_samples)
        st = self.stats.get(ln.tenant)
        if st is None or ln.last_end is None:
            return rate
        return rate * continuation_probability(st.gaps, now - ln.last_end, horizon, True, 1.0, 1.0, min_samples)

    def gap_median(self, tenant: str) -> float | None:
        st = self.stats.get(tenant)
        return median_gap(st.gaps) if st is not None else None

    def _reindex(self, ln: Lineage) -> None:
        index = self._index
        for k in ln.keys:
            if index.get(k) == ln.lid:
                del index[k]
        h = ln.last
        keys = [h[j] for j in range(ln.floor + STRIDE - 1 - ln.floor % STRIDE, len(h) - 1, STRIDE)][:MAX_KEYS]
        keys.append(h[-1])
        for k in keys:
            index[k] = ln.lid
        ln.keys = tuple(keys)

    def _drop(self, ln: Lineage) -> None:
        self.lineages.pop(ln.lid, None)
        self.paused.pop(ln.lid, None)
        for k in ln.keys:
            if self._index.get(k) == ln.lid:
                del self._index[k]
        ln.keys = ()
