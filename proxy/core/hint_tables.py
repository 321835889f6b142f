"""Byte-bounded tables of the hints surface (issue 22): every table a hint can grow has its own
byte budget, charged per entry by a conservative size estimate (``sys.getsizeof`` of its strings
plus measured per-object overheads; ``tests/core/test_hint_tables.py`` checks the charge against
``tracemalloc``), and evicts by value, not by count.

Why per-entry charges are stored: an entry is charged once, when it is put, and exactly that charge
is refunded when it leaves, so the total cannot drift however an entry leaves (replaced, popped,
evicted); ``recount`` recomputes the total from the entries and is what the tests compare against.

Eviction by value: when a put goes over budget, the lowest-valued of the ``scan`` least recently
used entries goes first (ties: the oldest). Without a value function it is plain LRU. The scan is
bounded so a flood of puts costs O(scan) each, not O(table).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

# Measured on CPython 3.11 (tests/core/test_hint_tables.py keeps these honest): an OrderedDict slot
# with its linked-list node and the (value, charge) pair; a small slotted object; a tuple header.
ENTRY_BYTES = 200
OBJECT_BYTES = 120
TUPLE_BYTES = 64


def str_bytes(s: str | None) -> int:
    """The real size of a string object (0 for None: a shared singleton)."""
    return 0 if s is None else sys.getsizeof(s)


def key_bytes(key: tuple[str, ...]) -> int:
    return TUPLE_BYTES + 8 * len(key) + sum(sys.getsizeof(p) for p in key)


class ByteLRU(Generic[K, V]):
    """An LRU map with a byte budget and value-based eviction (see the module docstring)."""

    __slots__ = ("_d", "budget", "bytes", "evicted", "on_evict", "scan", "value")

    def __init__(
        self,
        budget: int,
        value: Callable[[V], float] | None = None,
        scan: int = 32,
        on_evict: Callable[[K, V], None] | None = None,
    ) -> None:
        self._d: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self.budget = max(0, int(budget))
        self.bytes = 0
        self.evicted = 0
        self.value = value
        self.scan = max(1, scan)
        self.on_evict = on_evict

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __bool__(self) -> bool:
        return bool(self._d)

    def __iter__(self) -> Iterator[K]:
        return iter(self._d)

    def __getitem__(self, key: K) -> V:
        return self._d[key][0]

    def get(self, key: K) -> V | None:
        hit = self._d.get(key)
        return None if hit is None else hit[0]

    def touch(self, key: K) -> None:
        if key in self._d:
            self._d.move_to_end(key)

    def items(self) -> Iterator[tuple[K, V]]:
        return ((k, v) for k, (v, _) in self._d.items())

    def values(self) -> Iterator[V]:
        return (v for v, _ in self._d.values())

    def put(self, key: K, value: V, size: int) -> bool:
        """Insert or replace ``key`` (most recently used), charged ``size`` + the entry overhead;
        evicts by value until the total fits. False when the entry alone exceeds the budget (then
        it is not stored)."""
        charge = ENTRY_BYTES + max(0, int(size))
        old = self._d.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        if charge > self.budget:
            return False
        self._d[key] = (value, charge)
        self.bytes += charge
        while self.bytes > self.budget and self.evict_one(protect=key):
            pass
        return True

    def pop(self, key: K) -> V | None:
        hit = self._d.pop(key, None)
        if hit is None:
            return None
        self.bytes -= hit[1]
        return hit[0]

    def clear(self) -> None:
        self._d.clear()
        self.bytes = 0

    def recount(self) -> int:
        """The total recomputed from the stored charges (what ``bytes`` must equal)."""
        self.bytes = sum(c for _, c in self._d.values())
        return self.bytes

    def evict_one(self, protect: K) -> bool:
        victim: K | None = None
        found = False
        best = float("inf")
        value = self.value
        for i, (k, (v, _)) in enumerate(self._d.items()):
            if i >= self.scan:
                break
            if k == protect:
                continue
            if value is None:
                victim, found = k, True
                break
            score = value(v)
            if score < best or not found:
                best, victim, found = score, k, True
        if not found:
            return False
        v, charge = self._d.pop(victim)  # type: ignore[arg-type]  # found: victim is a key
        self.bytes -= charge
        self.evicted += 1
        if self.on_evict is not None:
            self.on_evict(victim, v)  # type: ignore[arg-type]
        return True
