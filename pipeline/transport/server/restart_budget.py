"""How often ``pipeline.serve --processes N`` restarts a process that died: at most R restarts in any W seconds.

A process that dies now and then (a crash one device's messages trigger, the kernel's OOM killer) is restarted
every time, as gunicorn's and uvicorn's supervisors restart a worker. One that dies again and again (a fault in
its setup or its machine, a device that crashes every process it reaches) would be restarted for ever, each
start loading its models while the devices it takes are cut each time; past the limit the supervisor stops
every process and says why, as systemd does for a unit past ``StartLimitBurst`` in ``StartLimitIntervalSec``.
Times are passed in (seconds on any monotonic clock), so the budget is tested on exact values.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

# systemd's StartLimitBurst: five starts before a unit that keeps failing is left down
DEFAULT_RESTARTS = 5
# Not systemd's 10 s: a process here takes seconds (the simulator) to minutes (real models on a cold cache) to
# start, and a window shorter than five starts could never fill, so a crash loop would be restarted for ever
DEFAULT_WINDOW_S = 300.0


@dataclass(frozen=True, slots=True)
class RestartLimit:
    """At most ``restarts`` restarts, every process's together, in any ``window_s`` seconds (N processes that
    each die again and again are one fault, not N); 0 restarts: a process that ends stops them all."""

    restarts: int = DEFAULT_RESTARTS
    window_s: float = DEFAULT_WINDOW_S

    def __post_init__(self) -> None:
        if self.restarts < 0:
            raise ValueError(f"--max-restarts {self.restarts}: 0 or more")
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"--restart-window-s {self.window_s:g}: a positive number of seconds")


class RestartBudget:
    """The restarts taken in the last ``window_s`` seconds; a restart is allowed while fewer than the limit."""

    def __init__(self, limit: RestartLimit) -> None:
        self.limit = limit
        self._taken: deque[float] = deque()  # when each restart in the window was taken, oldest first

    def take(self, now_s: float) -> bool:
        """Take one restart at ``now_s`` if the window has room (True), else take nothing (False)."""
        self._forget(now_s)
        if len(self._taken) >= self.limit.restarts:
            return False
        self._taken.append(now_s)
        return True

    def in_window(self, now_s: float) -> int:
        """Restarts taken in the window that ends at ``now_s``."""
        self._forget(now_s)
        return len(self._taken)

    def _forget(self, now_s: float) -> None:
        # a restart taken at t counts until t + window_s, that instant excluded
        while self._taken and now_s - self._taken[0] >= self.limit.window_s:
            self._taken.popleft()
