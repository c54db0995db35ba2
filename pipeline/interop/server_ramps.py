"""Capacity mode of ``scripts/interop/xiaozhi_server.py``: each server ramped by ``python -m pipeline.capacity``.

A ramp is run as a process (``pipeline.capacity`` is a command like any other here), given the
server's PID so that it records the server's CPU and memory per step. Beside it this module
meters every other process of the run (the MQTT gateway, the speech services, the emulated
cloud) over the whole ramp from ``/proc``, so the table can say whether a stand-in, rather than
the server, was what ran out. ``report.py``-style reading of each ramp's folder is in
``ramp_table.py``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class RampSettings:
    """What every ramp of one invocation is run with."""

    steps: str  # "1,2,5,10"
    hold: str  # "30s"
    margin: str = ""  # pipeline.capacity's --margin, "" for its default
    profile: Path | None = None  # a load profile (TOML), None for pipeline.capacity's default
    extra: tuple[str, ...] = ()  # anything else to pass on, as given


@dataclass(frozen=True, slots=True)
class RampTarget:
    """One server a ramp runs against: its URL, its name in the report, its process, and the lab's traces."""

    server: str
    label: str
    pid: int | None = None  # its CPU and RSS per step, when local
    traces: Path | None = None  # the lab's server's trace folder: which part of the silence grew first


def ramp_argv(python: str, fixtures: Path, target: RampTarget, settings: RampSettings, out: Path) -> list[str]:
    """The ``pipeline.capacity`` command line for one server."""
    argv = [python, "-m", "pipeline.capacity", str(fixtures), "--server", target.server, "--label", target.label]
    argv += ["--steps", settings.steps, "--hold", settings.hold, "--out", str(out)]
    if target.pid is not None:
        argv += ["--server-pid", str(target.pid)]
    if target.traces is not None:
        argv += ["--server-traces", str(target.traces)]
    if settings.margin:
        argv += ["--margin", settings.margin]
    if settings.profile is not None:
        argv += ["--profile", str(settings.profile)]
    return [*argv, *settings.extra]


def passed_on(options: Mapping[str, object]) -> tuple[str, ...]:
    """Options given to the script, passed on to each ``pipeline.capacity`` as given (None or 0: not given)."""
    return tuple(part for option, value in options.items() if value for part in (option, str(value)))


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds the process has used (its own, not its children's); None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass
class ProcessCpu:
    """Mean CPU (percent of one core) of named processes between ``start`` and ``stop``."""

    pids: Mapping[str, int]
    started: dict[str, float] = field(default_factory=dict)
    means: dict[str, float | None] = field(default_factory=dict)
    _t0: float = 0.0

    def start(self, now_s: float) -> None:
        self._t0 = now_s
        self.started = {name: c for name, pid in self.pids.items() if (c := cpu_seconds(pid)) is not None}

    def stop(self, now_s: float) -> dict[str, float | None]:
        span = now_s - self._t0
        for name, pid in self.pids.items():
            used, first = cpu_seconds(pid), self.started.get(name)
            self.means[name] = None if used is None or first is None or span <= 0 else 100 * (used - first) / span
        return self.means


def said(log: str, pattern: str) -> str:
    """The first group of the last line of ``log`` matching ``pattern``; "" when none does."""
    found = re.findall(pattern, log, flags=re.MULTILINE)
    return str(found[-1]) if found else ""


@dataclass(frozen=True, slots=True)
class EndedRamp:
    """One server's ramp as it ended: its label, folder, what it printed, exit code and the run's other CPUs."""

    label: str
    folder: Path
    log: str
    code: int
    cpu: Mapping[str, float | None]

    @property
    def held(self) -> str:
        return said(self.log, r"devices held:\s*(.+)$")

    @property
    def grew_first(self) -> str:
        return said(self.log, r"grew first:?\s*(.+)$")


def cpu_cells(cpu: Mapping[str, float | None], names: Sequence[str]) -> list[str]:
    return ["-" if cpu.get(n) is None else f"{cpu[n]:.0f}%" for n in names]
