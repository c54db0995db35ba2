"""The shared model's scheduler: a concurrency limit, a queue or a refusal, and priority classes.

A home with several devices, or a device that also runs background jobs, shares one model;
whoever finds it busy waits, and that wait is the queue segment (METHOD M2) a single client
never sees. The scheduler reads the injected clock when a call asks and when it is granted a
slot, so the queue wait is its own measurement, not a difference of other stages' stamps.

Order: interactive calls before background ones when ``priority`` is on; first come, first
served within a class (and across classes when it is off). A slot that frees is handed to the
next waiter directly, so a call arriving at that moment cannot overtake the queue.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass, field

from pipeline.clock import Clock
from stages.llm import LlmError

INTERACTIVE = "interactive"
BACKGROUND = "background"
RANKS = {INTERACTIVE: 0, BACKGROUND: 1}


class QueueFull(LlmError):
    """The scheduler refused the call: no free slot and no room (or no permission) to wait."""


@dataclass(slots=True)
class Grant:
    """One call's slot: when it asked, when it got the slot, and whether it has given it back."""

    priority: str
    enqueued_ns: int
    granted_ns: int
    released: bool = False


@dataclass(slots=True)
class SchedulerCounts:
    """What the scheduler did over a run: calls let through, calls refused, the longest queue."""

    granted: int = 0
    rejected: int = 0
    max_waiting: int = 0  # the longest the queue grew


@dataclass(order=True, slots=True)
class _Waiter:
    rank: int
    seq: int
    future: asyncio.Future[None] = field(compare=False)


class Scheduler:
    """At most ``concurrency`` calls run at once; the rest wait (``when_full="queue"``) or are refused."""

    def __init__(
        self, clock: Clock, concurrency: int, when_full: str = "queue", max_waiting: int = 0, priority: bool = True
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"scheduler concurrency {concurrency}: at least 1")
        if when_full not in ("queue", "reject"):
            raise ValueError(f"scheduler when_full {when_full!r}: queue or reject")
        self.clock, self.concurrency, self.when_full = clock, concurrency, when_full
        self.max_waiting, self.priority = max_waiting, priority
        self.counts = SchedulerCounts()
        self._running = 0
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiting if not w.future.done())

    async def acquire(self, priority: str) -> Grant:
        """Wait for a slot (or be refused with ``QueueFull``); the grant must be released."""
        if priority not in RANKS:
            raise ValueError(f"priority {priority!r}: {' or '.join(RANKS)}")
        enqueued = self.clock.now_ns()
        if self._running < self.concurrency and not self.waiting:
            self._running += 1
        else:
            self._refuse_if_full(priority)
            await self._wait(priority)
        self.counts.granted += 1
        return Grant(priority, enqueued, self.clock.now_ns())

    def release(self, grant: Grant) -> None:
        """Give the slot back (once; later calls are no-ops) and hand it to the next waiter."""
        if grant.released:
            return
        grant.released = True
        self._running -= 1
        self._hand_over()

    def _refuse_if_full(self, priority: str) -> None:
        if self.when_full == "reject":
            self.counts.rejected += 1
            raise QueueFull(f"the model is busy ({self.concurrency} call(s) running) and the scheduler rejects")
        if self.max_waiting and self.waiting >= self.max_waiting:
            self.counts.rejected += 1
            raise QueueFull(f"{self.waiting} call(s) already wait for the model (max_waiting {self.max_waiting})")

    async def _wait(self, priority: str) -> None:
        rank = RANKS[priority] if self.priority else 0
        waiter = _Waiter(rank, next(self._seq), asyncio.get_running_loop().create_future())
        heapq.heappush(self._waiting, waiter)
        self.counts.max_waiting = max(self.counts.max_waiting, self.waiting)
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self._running -= 1  # granted, but its caller is gone: the slot goes to the next one
                self._hand_over()
            raise

    def _hand_over(self) -> None:
        while self._waiting and self._running < self.concurrency:
            waiter = heapq.heappop(self._waiting)
            if waiter.future.done():  # cancelled while waiting
                continue
            self._running += 1
            waiter.future.set_result(None)
