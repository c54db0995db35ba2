"""The CPU a stage used, read by the timing wrapper at the stage's start and at its first output.

Wall time alone cannot tell a slower machine from a stage that waited. The same transcription of
the same audio is the same work, so its CPU time moves with the machine's speed (a busy host, a
throttled core, cold caches). A stage that waited for a core shows it elsewhere: switches forced on
this process (another thread of ours, llama.cpp's spinning workers), other processes' time, or the
hypervisor's steal. So the meter reads this process's CPU time and switches over all its threads
(``getrusage``) and the machine's busy and steal time (``/proc/stat``). Where ``/proc`` cannot be read
the machine's figures are None, never invented; in simulated time there is no meter at all.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.endpoints.machine_load import machine_ticks
from pipeline.tracing.timeline import StageCpu

PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True, slots=True)
class CpuReading:
    """The counters at one moment; two of them give a ``StageCpu``."""

    user_s: float
    system_s: float
    voluntary: int
    involuntary: int
    busy_ticks: int | None  # every core's busy time, steal included; None: /proc unreadable
    steal_ticks: int | None


class CpuMeter:
    """Reads this process's and the machine's CPU counters (``read``) and turns two readings into what a
    stage used between them (``between``)."""

    def __init__(self, stat: Path = PROC_STAT, usage: Callable[[], Any] | None = None) -> None:
        self.stat = stat
        self._usage = usage or (lambda: resource.getrusage(resource.RUSAGE_SELF))
        self.tick_ms = 1000 / os.sysconf("SC_CLK_TCK")

    def read(self) -> CpuReading:
        u = self._usage()
        busy, steal = self._machine()
        return CpuReading(u.ru_utime, u.ru_stime, u.ru_nvcsw, u.ru_nivcsw, busy, steal)

    def between(self, start: CpuReading, end: CpuReading) -> StageCpu:
        user_ms = (end.user_s - start.user_s) * 1000
        system_ms = (end.system_s - start.system_s) * 1000
        steal_ms = other_ms = None
        if start.busy_ticks is not None and end.busy_ticks is not None:
            machine_ms = (end.busy_ticks - start.busy_ticks) * self.tick_ms
            # the machine's time comes in whole ticks, ours in microseconds: a small negative is rounding
            other_ms = round(max(0.0, machine_ms - user_ms - system_ms), 1)
        if start.steal_ticks is not None and end.steal_ticks is not None:
            steal_ms = round((end.steal_ticks - start.steal_ticks) * self.tick_ms, 1)
        return StageCpu(
            round(user_ms, 1),
            round(system_ms, 1),
            end.voluntary - start.voluntary,
            end.involuntary - start.involuntary,
            other_ms,
            steal_ms,
        )

    def _machine(self) -> tuple[int | None, int | None]:
        try:
            return machine_ticks(self.stat)
        except (OSError, ValueError, IndexError):
            return None, None
