"""Other load on the machine during a turn: CPU time other processes used, and the load average.

llama.cpp with threads = cores slows several-fold when any other process runs, so a turn
measured beside other work describes the machine's load, not the voice chain. The probe
reads ``/proc/stat`` (CPU time of the whole machine) and the CPU time of this process and
its descendants (llama-server, espeak-ng; children that exited count through ``cutime``),
at the start and end of each turn; the difference is what everything else used.
Where ``/proc`` cannot be read there is no figure, never an invented one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class CpuSample:
    """The CPU-time counters at one moment; two of them, a turn apart, give the turn's ``TurnLoad``."""

    machine_ticks: int  # busy CPU time of all cores (user, nice, system, irq, softirq, steal)
    tree_ticks: int  # CPU time of this process, its descendants and its reaped children


@dataclass(frozen=True, slots=True)
class TurnLoad:
    """The other load during one turn, as the turn span records it."""

    other_cpu_ms: float  # CPU time other processes used during the turn
    load_avg_1m: float | None


class LoadProbe:
    """Reads ``/proc`` at a turn's start and end (``sample``) and turns the two readings into the turn's load
    (``between``); None wherever ``/proc`` cannot be read."""

    def __init__(self, proc: Path = PROC, pid: int | None = None) -> None:
        self.proc = proc
        self.pid = pid if pid is not None else os.getpid()
        self.tick_ms = 1000 / os.sysconf("SC_CLK_TCK")

    def sample(self) -> CpuSample | None:
        try:
            return CpuSample(self._machine(), self._tree())
        except (OSError, ValueError, IndexError):
            return None

    def load_avg(self) -> float | None:
        try:
            return float((self.proc / "loadavg").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def between(self, start: CpuSample | None, end: CpuSample | None) -> TurnLoad | None:
        if start is None or end is None:
            return None
        other = (end.machine_ticks - start.machine_ticks) - (end.tree_ticks - start.tree_ticks)
        return TurnLoad(round(max(0, other) * self.tick_ms, 1), self.load_avg())

    def _machine(self) -> int:
        return machine_ticks(self.proc / "stat")[0]

    def _tree(self) -> int:
        return tree_ticks(self.proc, {self.pid: [self.pid, *self._tracer()]})[self.pid]

    def _tracer(self) -> list[int]:
        """The process tracing this one (strace in condition B'): it works for this run, its time is ours."""
        try:
            for line in (self.proc / str(self.pid) / "status").read_text().splitlines():
                if line.startswith("TracerPid:"):
                    pid = int(line.split()[1])
                    return [pid] if pid else []
        except (OSError, ValueError, IndexError):
            pass
        return []


def machine_ticks(stat: Path) -> tuple[int, int]:
    """From ``/proc/stat``'s first line: every core's busy ticks (user, nice, system, irq, softirq, steal) and
    the steal among them. Raises OSError, ValueError or IndexError where it cannot be read."""
    first = stat.read_text().splitlines()[0].split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in first[1:9])
    return user + nice + system + irq + softirq + steal, steal


def tree_ticks(proc: Path, roots: dict[int, list[int]]) -> dict[int, int]:
    """CPU ticks of each process tree, keyed as ``roots`` (key -> the pids whose trees it sums): each pid,
    its descendants and its reaped children, read in one pass over ``proc``; a tree that ended gives 0."""
    stats, children = _table(proc)
    out = {}
    for key, pids in roots.items():
        out[key] = sum(
            sum(int(stats[pid][i]) for i in (11, 12, 13, 14))  # utime, stime, cutime, cstime
            for pid in _walk(pids, children)
            if pid in stats
        )
    return out


def tree_pids(proc: Path, pid: int) -> list[int]:
    """The process and its descendants that ``proc`` lists now (one that ended meanwhile is left out)."""
    stats, children = _table(proc)
    return [member for member in _walk([pid], children) if member in stats]


def _table(proc: Path) -> tuple[dict[int, list[str]], dict[int, list[int]]]:
    """Every process's stat fields, and each parent's children, read in one pass over ``proc``."""
    stats = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = _fields(entry / "stat")
            except (OSError, ValueError, IndexError):
                continue  # a process that ended meanwhile
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    return stats, children


def _walk(pids: list[int], children: dict[int, list[int]]) -> Iterator[int]:
    todo = list(pids)
    while todo:
        pid = todo.pop()
        yield pid
        todo += children.get(pid, [])


def _fields(path: Path) -> list[str]:
    """A /proc/PID/stat line after the command name (which may hold spaces): state, ppid, ..."""
    text = path.read_text()
    return text[text.rindex(")") + 2 :].split()
