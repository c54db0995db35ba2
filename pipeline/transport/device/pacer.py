"""How late the device emulator's paced sends went: the load generator's own lateness, one record per event loop.

A fleet that falls behind its own schedule measures itself, not the server (a capacity step where
the generator was late is void). Every paced send records how far it went after its due time;
values are kept in a flat array of doubles, not as objects the garbage collector must chase.
"""

from __future__ import annotations

import asyncio
import weakref
from array import array

import numpy as np


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


_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SendLateness] = weakref.WeakKeyDictionary()


def send_lateness() -> SendLateness:
    """The running loop's record: every device on the loop shares it."""
    loop = asyncio.get_running_loop()
    record = _BY_LOOP.get(loop)
    if record is None:
        record = _BY_LOOP[loop] = SendLateness()
    return record
