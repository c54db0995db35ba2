"""Real and virtual clocks, injected wherever time is read.

The real clock reads ``time.perf_counter_ns`` and maps it once to epoch
nanoseconds, so span times are monotonic within a run yet absolute. The virtual
clock runs the whole asyncio program on an event loop whose time only moves when
every task is waiting on a timer: scripted latencies then become exact and a
ten-second turn takes milliseconds to simulate.

``LeakyBucket`` meters on a clock: the server's flood guard and the device's downlink guard both keep one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import selectors
import time
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

# A fixed epoch for virtual runs, so traces of a virtual run are reproducible.
VIRTUAL_EPOCH_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z


class Clock(Protocol):
    """Gives the current time as epoch nanoseconds."""

    kind: str

    def now_ns(self) -> int: ...


class RealClock:
    """Monotonic time, mapped to the epoch once at construction."""

    kind = "real"

    def __init__(self) -> None:
        self._epoch_ns = time.time_ns()
        self._mono_ns = time.perf_counter_ns()

    def now_ns(self) -> int:
        return self._epoch_ns + (time.perf_counter_ns() - self._mono_ns)


class VirtualClock:
    """Reads the virtual time of the running ``VirtualEventLoop``."""

    kind = "virtual"

    def now_ns(self) -> int:
        loop = asyncio.get_running_loop()
        if not isinstance(loop, VirtualEventLoop):
            raise RuntimeError("VirtualClock needs a VirtualEventLoop (use run_on_clock)")
        return VIRTUAL_EPOCH_NS + loop.virtual_us * 1000


class _AdvancingSelector(selectors.BaseSelector):
    """Polls real I/O without blocking; where the loop would block, time jumps instead."""

    # How long a virtual loop may wait for real I/O (threads, pipes) before it
    # declares the program deadlocked rather than hanging a test forever.
    IDLE_LIMIT_S = 30.0

    def __init__(self, loop: VirtualEventLoop) -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            ready = self._real.select(self.IDLE_LIMIT_S)
            if not ready:
                raise RuntimeError("virtual event loop: nothing scheduled and no I/O (deadlock)")
            return ready
        self._loop.advance(timeout)
        return []


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is virtual, in whole microseconds."""

    def __init__(self) -> None:
        self.virtual_us = 0
        super().__init__(selector=_AdvancingSelector(self))

    def time(self) -> float:
        return self.virtual_us / 1_000_000

    def advance(self, seconds: float) -> None:
        # Microsecond steps keep every scripted millisecond exact despite float timers.
        self.virtual_us += max(1, round(seconds * 1_000_000))


# select() can only watch descriptors below this (glibc's FD_SETSIZE).
_FD_SETSIZE = 1024


class FineTimerSelector(selectors.EpollSelector):
    """epoll, but a wait ends on time to the microsecond instead of at the next millisecond.

    epoll_wait takes whole milliseconds and ``selectors`` rounds up, so every asyncio timer
    of a real-clock run fired 0-1 ms late (scripts/bench_core.py: scripted stage times came
    out 1.07 ms long at the median, 0.50 ms with this). select() takes microseconds, and an
    epoll descriptor is itself readable whenever one of its registered descriptors is ready,
    so waiting on it first and then collecting with a zero timeout loses no event.
    """

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout > 0 and self.fileno() < _FD_SETSIZE:
            select.select([self.fileno()], [], [], timeout)
            timeout = 0
        return super().select(timeout)


class RealEventLoop(asyncio.SelectorEventLoop):
    """asyncio's loop with timers to the microsecond, woken by threads with ``write`` instead of ``send``.

    A worker thread (llama.cpp's tokens, a decoder finishing) wakes the loop through its
    self-pipe. asyncio writes it with ``send``, which Linux makes a ``sendto`` system call:
    the very call condition B' must trace to catch a native datagram, so under B' every
    token stopped the process for strace. ``write`` on the same socket is the same wake-up
    without the traced call.
    """

    def __init__(self) -> None:
        super().__init__(FineTimerSelector())

    def _write_to_self(self) -> None:
        csock = getattr(self, "_csock", None)
        if csock is None:
            return
        with contextlib.suppress(OSError):  # the pipe is full (the loop wakes anyway) or already closed
            os.write(csock.fileno(), b"\0")


def real_event_loop() -> asyncio.AbstractEventLoop:
    """The event loop for real-clock runs (Linux): asyncio's own, with timers to the microsecond."""
    return RealEventLoop()


def run_on_clock(coro: Coroutine[Any, Any, T], clock: Clock) -> T:
    """Run ``coro`` to completion on an event loop that matches ``clock``."""
    if clock.kind == "virtual":
        loop = VirtualEventLoop()
        try:
            return loop.run_until_complete(coro)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
    with asyncio.Runner(loop_factory=real_event_loop) as runner:
        return runner.run(coro)


class LeakyBucket:
    """At most ``capacity``, refilled at ``per_s`` as ``clock`` moves: ``take`` says whether ``amount`` was there."""

    def __init__(self, capacity: float, per_s: float, clock: Clock) -> None:
        self.capacity, self.per_s, self.clock = capacity, per_s, clock
        self.level = capacity
        self.last = clock.now_ns()

    def take(self, amount: float) -> bool:
        now = self.clock.now_ns()
        self.level = min(self.capacity, self.level + (now - self.last) / 1e9 * self.per_s)
        self.last = now
        if self.level < amount:
            return False
        self.level -= amount
        return True
