"""The simulated engine's waiting queue: one strategy per scheduling policy.

Why a module of its own: vLLM keeps this as a strategy too (`vllm/v1/core/sched/request_queue.py`:
`FCFSRequestQueue`, `PriorityRequestQueue`, `create_request_queue`), and the scheduler only peeks,
pops, prepends and removes. Three policies:
- `fcfs` (vLLM default): a deque; a preempted request goes back to the *front*
  (`FCFSRequestQueue.prepend_request` = `appendleft`).
- `priority` (vLLM `--scheduling-policy priority`): a heap on (priority, arrival), lower first
  (`PriorityRequestQueue`; `Request.__lt__` compares (priority, arrival_time)); "prepending" a
  preempted request just pushes it back into the heap.
- `sglang` (SGLang `--enable-priority-scheduling`): the waiting list sorted by
  (priority × sign, queue-entry time) before each scheduling pass
  (`schedule_policy.py: SchedulePolicy._sort_by_priority_and_fcfs`), sign = -1 unless
  `--schedule-low-priority-values-first` (larger values first by default).
Ties on equal keys fall back to a submission sequence number, so the order is deterministic.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator
from typing import Any, Protocol

POLICIES = ("fcfs", "priority", "sglang")


class Queued(Protocol):
    priority: int
    arrival: float


class RequestQueue:
    """Interface (vLLM's `RequestQueue`): add, peek, pop, prepend, remove, len, iter, bool, [0]."""

    def add(self, req: Any) -> None:
        raise NotImplementedError

    def peek(self) -> Any:
        raise NotImplementedError

    def pop(self) -> Any:
        raise NotImplementedError

    def prepend(self, req: Any) -> None:
        raise NotImplementedError

    def remove(self, req: Any) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError

    def __bool__(self) -> bool:
        return len(self) > 0

    def __getitem__(self, i: int) -> Any:
        if i != 0:
            raise IndexError("only the head of a request queue can be indexed")
        return self.peek()

    def __contains__(self, req: object) -> bool:
        return any(r is req for r in self)


class FcfsQueue(RequestQueue):
    def __init__(self) -> None:
        self._q: deque[Any] = deque()

    def add(self, req: Any) -> None:
        self._q.append(req)

    def peek(self) -> Any:
        return self._q[0]

    def pop(self) -> Any:
        return self._q.popleft()

    def prepend(self, req: Any) -> None:
        self._q.appendleft(req)

    def remove(self, req: Any) -> None:
        self._q.remove(req)

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._q)


class PriorityQueue(RequestQueue):
    """vLLM's heap on (priority, arrival); `sign=-1` orders larger priorities first (SGLang)."""

    def __init__(self, sign: int = 1) -> None:
        self._heap: list[tuple[int, float, int, Any]] = []
        self._seq = itertools.count()
        self.sign = sign

    def add(self, req: Any) -> None:
        heapq.heappush(self._heap, (req.priority * self.sign, req.arrival, next(self._seq), req))

    def peek(self) -> Any:
        return self._heap[0][3]

    def pop(self) -> Any:
        return heapq.heappop(self._heap)[3]

    def prepend(self, req: Any) -> None:
        self.add(req)  # no "front" in a priority queue (vLLM PriorityRequestQueue.prepend_request)

    def remove(self, req: Any) -> None:
        self._heap = [e for e in self._heap if e[3] is not req]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Any]:
        return (e[3] for e in sorted(self._heap, key=lambda e: e[:3]))


def create_request_queue(policy: str, low_priority_values_first: bool = False) -> RequestQueue:
    if policy == "fcfs":
        return FcfsQueue()
    if policy == "priority":
        return PriorityQueue(1)
    if policy == "sglang":
        return PriorityQueue(1 if low_priority_values_first else -1)
    raise ValueError(f"scheduling_policy must be one of {POLICIES}, got {policy!r}")
