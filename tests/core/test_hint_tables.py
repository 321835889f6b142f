"""Byte-bounded hint tables (issue 22): the charge is an upper bound of the real size (tracemalloc),
each table stays within its budget under floods, eviction goes by value, and the pending-check
count equals the open checks after sources are forgotten and deadlines pass."""

from __future__ import annotations

import gc
import tracemalloc

from proxy.core.hint_actions import HintDriver
from proxy.core.hint_checks import CheckBook
from proxy.core.hint_scope import HintScope
from proxy.core.hint_tables import ByteLRU
from proxy.core.hint_trust import TrustBook
from proxy.core.hints import ACCEPTED, FACT, HINT_KINDS, IGNORED_UNCHECKED, Hint, HintConfig


def measured(build) -> tuple[int, object]:
    """Bytes the objects ``build()`` creates still hold (tracemalloc), and the result."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    out = build()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    return grown, out


def test_bytelru_accounting_cannot_drift_and_evicts_by_value():
    t: ByteLRU[str, int] = ByteLRU(10_000, value=lambda v: v)
    for i in range(500):
        t.put(f"k{i % 97}", i % 7, 100 + i % 13)  # replaced, evicted, re-added
        if i % 5 == 0:
            t.pop(f"k{(i * 3) % 97}")
        assert t.bytes == t.recount() <= 10_000
    small: ByteLRU[str, int] = ByteLRU(3 * 300, value=lambda v: v)
    for k, v in (("a", 5), ("b", 1), ("c", 9)):
        small.put(k, v, 100)
    small.put("d", 7, 100)  # over budget: the lowest value ("b") goes, not the oldest ("a")
    assert set(small) == {"a", "c", "d"} and small.evicted == 1
    assert not small.put("huge", 1, 10_000) and "huge" not in small


def test_source_table_charge_bounds_the_real_size():
    def build() -> TrustBook:
        book = TrustBook(HintConfig(sources_max_bytes=64 << 20))
        for i in range(2000):
            sid = f"k{i:012x}"
            for kind in HINT_KINDS:  # every kind tallied: the largest a record gets
                book.admit(sid, kind, float(i))
        return book

    real, book = measured(build)
    assert isinstance(book, TrustBook) and len(book.sources) == 2000
    charged = book.sources.bytes
    assert real <= charged <= 3 * real, (real, charged)


def test_check_table_charge_bounds_the_real_size():
    ids = tuple(f"branch-{j}-" + "x" * 240 for j in range(64))

    def build() -> CheckBook:
        book = TrustBook(HintConfig(max_checks_per_source=10_000, checks_max_bytes=1 << 30, max_pending=1 << 20))
        checks = CheckBook(book)
        book.admit("k1", "fanout", 0.0)
        for i in range(300):
            key = ("tenant", "p1", f"parent-{i}-" + "s" * 100)
            checks.watch(key, "k1", "fanout", FACT, 0.0, 60.0, 0, branch_ids=tuple(f"{i}{b}" for b in ids))
            checks.watch(key, "k1", "next_agent", FACT, 0.0, 60.0, 0, agent_name=f"agent-{i}-" + "a" * 200)
        return checks

    real, checks = measured(build)
    assert isinstance(checks, CheckBook) and checks.trust.pending == 600
    assert real <= checks.bytes <= 3 * real, (real, checks.bytes)


def test_scope_tables_charge_bounds_the_real_size():
    def build() -> HintScope:
        scope = HintScope(1 << 30)
        for i in range(3000):
            scope.own("tenant-" + "t" * 20, f"session-{i}-" + "s" * 60, f"p{i:016x}")
            scope.bind("tenant-" + "t" * 20, f"p{i:016x}", f"agent-{i}-" + "a" * 40, f"{i:012x}")
        return scope

    real, scope = measured(build)
    assert isinstance(scope, HintScope)
    charged = scope.owners.bytes + scope.names.bytes
    assert real <= charged <= 3 * real, (real, charged)


def test_tables_stay_within_budget_under_a_flood(workload):
    w = workload()
    cfg = HintConfig(sources_max_bytes=1 << 18, checks_max_bytes=1 << 19, state_max_bytes=1 << 17)
    d = HintDriver(w.policy, cfg)
    ids = tuple("b" * 250 + str(j) for j in range(64))
    for k in range(3000):
        src = f"k{k % 700:012x}"
        hints = [
            Hint("fanout", f"f{k}", branches=64, branch_ids=ids),
            Hint("next_agent", f"n{k}-" + "s" * 200, agent="a" * 250),
            Hint("session_ended", f"e{k}"),
        ]
        d.submit(hints, src, float(k) * 0.01, tenant="t", principal=f"p{k % 50}")
        d.observe("t", f"e{k}", None, f"name-{k}", float(k) * 0.01, principal=f"p{k % 50}")
    b = d.table_bytes()
    assert b["sources"] <= 1 << 18 and b["checks"] <= 1 << 19
    assert max(b["plans"], b["pins"], b["owners"], b["names"], b["offered"]) <= 1 << 17
    assert d.trust.pending == sum(len(v) for v in d.checks.by_source.values()) == d.checks.recount()


def test_pending_checks_are_recounted_and_the_liar_bound_holds_after_700_sources(workload):
    """The issue's case: 700 sources fill the table, some are forgotten with checks open; after the
    deadlines the count is exactly 0 (not 6,135), and a liar then drives at most max_unchecked."""
    w = workload()
    cfg = HintConfig(sources_max_bytes=300 * 2300)  # ~300 sources: the 700 force evictions
    d = HintDriver(w.policy, cfg)
    for k in range(700):
        hints = [Hint("tool_started", f"t{k}-{i}") for i in range(16)] + [
            Hint("session_ended", f"t{k}-{i}") for i in range(16)
        ]
        d.submit(hints, f"k{k:012x}", 1.0 + k * 0.002)
        assert d.trust.pending == sum(len(v) for v in d.checks.by_source.values())
    assert len(d.trust.sources) < 700 and d.checks.bytes <= cfg.checks_max_bytes
    d.candidates(1000.0)  # every deadline has passed: the sweep settles and recounts
    assert d.trust.pending == 0 and not d.checks.by_source and not d.checks.watches
    assert all(r.unchecked == 0 and r.checks == 0 for r in d.trust.sources.values())
    said = [d.submit([Hint("tool_started", f"ghost-{k}")], "liar", 1001.0)[0] for k in range(40)]
    assert said.count(ACCEPTED) == cfg.max_unchecked and said[-1] == IGNORED_UNCHECKED


def test_a_forgotten_sources_checks_go_with_it():
    book = TrustBook(HintConfig(max_sources=2))
    checks = CheckBook(book)
    for sid in ("k1", "k2"):
        book.admit(sid, "tool_started", 0.0)
        checks.watch(("", "", f"s-{sid}"), sid, "tool_started", FACT, 0.0, 60.0, 0)
    book.admit("k3", "tool_started", 1.0)  # forgets one of the first two
    assert len(book.sources) == 2 and book.pending == 1 == checks.recount()
    assert set(checks.by_source) <= set(book.sources)
