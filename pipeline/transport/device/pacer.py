"""Paced sends for every device on an event loop: one shared pacer, and how late the sends went.

A thousand devices each sleeping 60 ms per frame put a thousand timers in the loop's heap and wake
the loop for each; the ``Pacer`` keeps one timer for the whole loop instead. Due times are whole
microseconds of loop time; waiters with the same due time share one slot and are released together,
in the order they asked, so devices whose start phase sits on the pacer's grid (``start_us``) share
slots: at most 60 distinct due times per 60 ms frame, however many devices there are.

A fleet that falls behind its own schedule measures itself, not the server (a capacity step where
the generator was late is void). Every paced send records how far it went after its due time
(``send_lateness``); values are kept in a flat array of doubles, not as objects the garbage
collector must chase.
"""

from __future__ import annotations

import asyncio
import heapq
import time
import weakref
from array import array
from typing import cast

import numpy as np

from pipeline.clock import VirtualEventLoop

GRID_US = 1000  # start phases are rounded up to this: devices share slots, the loop wakes at most once a ms


class SendLateness:
    """Every paced send's lateness (ms) since the last ``take``."""

    def __init__(self) -> None:
        self._values = array("d")

    def record(self, late_ms: float) -> None:
        self._values.append(late_ms)

    def take(self) -> np.ndarray:
        """The values recorded since the last ``take`` (ms), and a fresh start."""
        values, self._values = np.frombuffer(self._values, dtype=np.float64).copy(), array("d")
        return values


class Pacer:
    """Releases each waiter at its due time (whole µs of loop time) with one loop timer for all of them."""

    def __init__(self, loop: asyncio.AbstractEventLoop, grid_us: int = GRID_US) -> None:
        # weakly: the pacer is kept per loop in a weak-keyed table, which a strong reference would pin
        self.loop: asyncio.AbstractEventLoop = cast(asyncio.AbstractEventLoop, weakref.proxy(loop))
        self.grid_us = grid_us
        # a virtual loop's time is its own; a real loop's is the monotonic clock (asyncio's loop.time()), read
        # here itself because uvloop's loop.time() is cached once per loop iteration, in whole milliseconds
        self._virtual = isinstance(loop, VirtualEventLoop)
        self._slots: dict[int, list[asyncio.Future[None]]] = {}
        self._dues: list[int] = []  # a heap of the slots' due times
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0

    def _time(self) -> float:
        return self.loop.time() if self._virtual else time.monotonic()

    def now_us(self) -> int:
        return round(self._time() * 1_000_000)

    def start_us(self) -> int:
        """Now, rounded up to the grid: a phase that shares its slots with other devices'."""
        return -(-self.now_us() // self.grid_us) * self.grid_us

    def late_ms(self, due_us: int) -> float:
        """How far after ``due_us`` it is now (ms)."""
        return self._time() * 1000 - due_us / 1000

    def wait(self, due_us: int) -> asyncio.Future[None]:
        """Done at ``due_us`` (at once, if that has passed), after every waiter with an earlier due time."""
        waiter: asyncio.Future[None] = self.loop.create_future()
        slot = self._slots.get(due_us)
        if slot is not None:
            slot.append(waiter)
            return waiter
        self._slots[due_us] = [waiter]
        heapq.heappush(self._dues, due_us)
        if self._timer is None or due_us < self._timer_due:
            self._arm(due_us)
        return waiter

    def _arm(self, due_us: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_due = due_us
        self._timer = self.loop.call_at(due_us / 1_000_000, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = self.now_us()
        dues, slots = self._dues, self._slots
        while dues and dues[0] <= now:
            for waiter in slots.pop(heapq.heappop(dues)):
                if not waiter.done():  # its device stopped meanwhile
                    waiter.set_result(None)
        if dues:
            self._arm(dues[0])


_LATENESS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SendLateness] = weakref.WeakKeyDictionary()
_PACERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pacer] = weakref.WeakKeyDictionary()


def captured_ns(sent_ns: int, late_ms: float) -> int:
    """When a frame sent at ``sent_ns`` (the run's clock), ``late_ms`` after its due time, finished being
    captured: at its due time. A microphone captures at a steady pace whatever the loop's delays, so its
    frames follow each other without gap or overlap; the send's lateness is the device's own delay."""
    return sent_ns - round(max(0.0, late_ms) * 1_000_000)


class Capture:
    """A microphone's frames' capture moments on the run's clock: the first from its send less its
    lateness (``captured_ns``), each later one its due time's distance from the first's after it. The
    clock and the lateness are two readings, microseconds apart (more if the thread is preempted
    between them): taken once, they shift the whole stream by that, never one frame against the next."""

    def __init__(self) -> None:
        self._anchor: tuple[int, int] | None = None  # (capture moment ns, due µs) of the first frame

    def at(self, sent_ns: int, due_us: int, late_ms: float) -> int:
        if self._anchor is None:
            self._anchor = (captured_ns(sent_ns, late_ms), due_us)
        return self._anchor[0] + (due_us - self._anchor[1]) * 1000


def send_lateness() -> SendLateness:
    """The running loop's record: every device on the loop shares it."""
    loop = asyncio.get_running_loop()
    record = _LATENESS.get(loop)
    if record is None:
        record = _LATENESS[loop] = SendLateness()
    return record


def pacer() -> Pacer:
    """The running loop's pacer: every device on the loop shares it."""
    loop = asyncio.get_running_loop()
    shared = _PACERS.get(loop)
    if shared is None:
        shared = _PACERS[loop] = Pacer(loop)
    return shared
