"""The server's CPU and memory during a step's hold, when it is a local process (``--server-pid``), from /proc.

CPU is the process's user + system time over the hold's wall time, in % of one core (200 % is two cores
busy); RSS is the most seen by a sample every ``PERIOD_S``. Without a PID, or where /proc does not have it,
both stay None: an empty column, never an invented one.

The process's children count with it, so a server of several processes (``pipeline.serve --processes N``)
is probed by its parent's PID: its CPU is its tree's as /proc lists it at the hold's start and end, with the
children they reaped (``endpoints.load``'s reading, which the turn's load probe makes too); its RSS is that
of the processes in its tree at the start, sampled without reading all of /proc every ``PERIOD_S`` (that
reading grows with the machine's processes, and the sampler runs on the load generator's loop).

A soak reads it window by window (``take_window``): the CPU over the window, and the least and most RSS, open
file descriptors and threads of the tree sampled in it; the tree is listed again at each window, so a worker
the supervisor restarted is counted from the next window on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.endpoints.machine_load import PROC, tree_pids, tree_ticks

PERIOD_S = 0.5


class ProbeError(ValueError):
    """A PID that names no process this machine's /proc can read."""


def cpu_seconds(pid: int, proc: Path = Path("/proc")) -> float:
    """User + system CPU seconds the process has used (children it waited for are not its own)."""
    fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat(5)
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int, proc: Path = PROC) -> float:
    """CPU seconds of the process, its descendants and the children they reaped, so far."""
    seconds = tree_ticks(proc, {pid: [pid]})[pid] / os.sysconf("SC_CLK_TCK")
    if not (proc / str(pid) / "stat").is_file():  # a tree that ended reads as 0
        raise ProbeError(f"--server-pid {pid}: the process is gone")
    return seconds


def rss_sum_mb(pids: list[int], proc: Path = PROC) -> float:
    """The resident set sizes of ``pids`` summed, in MiB: the first's is needed, one of the others that ended
    is left out."""
    return tree_sum(pids, lambda member: rss_mb(member, proc))


def rss_mb(pid: int, proc: Path = Path("/proc")) -> float:
    """The process's resident set size now, in MiB."""
    for line in (proc / str(pid) / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise ProbeError(f"--server-pid {pid}: /proc gives no VmRSS")


def status_count(pid: int, key: str, proc: Path = PROC) -> int:
    """A count /proc/PID/status gives (``Threads``)."""
    for line in (proc / str(pid) / "status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise ProbeError(f"--server-pid {pid}: /proc gives no {key}")


def tree_sum(pids: list[int], one: Callable[[int], float]) -> float:
    """``one`` of each of ``pids`` summed: the first's is needed, one of the others that ended is left out."""
    total = one(pids[0])
    for member in pids[1:]:
        with contextlib.suppress(OSError, ValueError, ProbeError):
            total += one(member)
    return total


def fds_of(pid: int, proc: Path = PROC) -> int:
    """The process's open file descriptors now."""
    return len(os.listdir(proc / str(pid) / "fd"))


@dataclass
class WindowReading:
    """The server through one window: CPU over it, and the least and most of each sample taken in it."""

    cpu_pct: float | None = None
    rss_min_mb: float | None = None
    rss_max_mb: float | None = None
    fds_max: int | None = None
    threads_max: int | None = None

    def sampled(self, rss: float | None, fds: int | None, threads: int | None) -> None:
        if rss is not None:
            self.rss_min_mb = rss if self.rss_min_mb is None else min(self.rss_min_mb, rss)
            self.rss_max_mb = rss if self.rss_max_mb is None else max(self.rss_max_mb, rss)
        if fds is not None:
            self.fds_max = fds if self.fds_max is None else max(self.fds_max, fds)
        if threads is not None:
            self.threads_max = threads if self.threads_max is None else max(self.threads_max, threads)


def check_pid(pid: int | None) -> None:
    """Refuse a PID that cannot be probed, before the ramp starts."""
    if pid is None:
        return
    try:
        cpu_seconds(pid)
        rss_mb(pid)
    except (OSError, IndexError, ValueError) as exc:
        raise ProbeError(f"--server-pid {pid}: no process this machine can read ({exc})") from None


class ServerProbe:
    """Samples the server process while a step holds: ``start`` when the devices have arrived, ``stop`` at the
    hold's end; then ``cpu_pct`` and ``rss_max_mb`` (None without a PID, or when /proc could not tell)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.cpu_pct: float | None = None
        self.rss_max_mb: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._start: tuple[float, float] | None = None
        self._members: list[int] = []  # the server's tree at the start (again at each window: a restarted worker)
        self.window = WindowReading()
        self._window_start: tuple[float, float] | None = None

    def _sample_rss(self) -> None:
        rss = fds = threads = None
        with contextlib.suppress(OSError, ValueError, IndexError, ProbeError):
            rss = rss_sum_mb(self._members)
            self.rss_max_mb = rss if self.rss_max_mb is None else max(self.rss_max_mb, rss)
        with contextlib.suppress(OSError, ValueError, IndexError, ProbeError):
            fds = int(tree_sum(self._members, fds_of))
        with contextlib.suppress(OSError, ValueError, IndexError, ProbeError):
            threads = int(tree_sum(self._members, lambda member: status_count(member, "Threads")))
        self.window.sampled(rss, fds, threads)

    def _cpu_mark(self) -> tuple[float, float] | None:
        with contextlib.suppress(OSError, ValueError, IndexError, ProbeError):
            assert self.pid is not None
            return time.monotonic(), tree_cpu_seconds(self.pid)
        return None

    def take_window(self) -> WindowReading:
        """The server since the last call (or the start), and a new window begun: a soak's per-window reading."""
        if self.pid is None:
            return WindowReading()
        self._sample_rss()
        reading, self.window = self.window, WindowReading()
        mark = self._cpu_mark()
        if mark is not None and self._window_start is not None and mark[0] > self._window_start[0]:
            reading.cpu_pct = 100 * (mark[1] - self._window_start[1]) / (mark[0] - self._window_start[0])
        self._window_start = mark
        self._members = tree_pids(PROC, self.pid) or [self.pid]
        return reading

    async def _sampler(self) -> None:
        while True:
            self._sample_rss()
            await asyncio.sleep(PERIOD_S)

    def start(self) -> None:
        """Begin the hold's measurement (on the running loop)."""
        if self.pid is None or self._task is not None:
            return
        self._members = tree_pids(PROC, self.pid) or [self.pid]
        self._start = self._window_start = self._cpu_mark()
        self._task = asyncio.create_task(self._sampler())

    async def stop(self) -> None:
        """End it: the CPU over the hold, and a last RSS sample."""
        if self._task is None or self.pid is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._sample_rss()
        if self._start is not None:
            with contextlib.suppress(OSError, ValueError, IndexError):
                wall = time.monotonic() - self._start[0]
                used = tree_cpu_seconds(self.pid) - self._start[1]
                self.cpu_pct = 100 * used / wall if wall > 0 else None
