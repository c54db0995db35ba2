"""The device temperature sampled in the background while a run lasts, and each turn's reading (M9, M20).

A ``Thermometer`` takes a sample every ``[probe] temp_interval_ms`` from sysfs or the user's
``temp_command`` (``pipeline.endpoints.thermal``), timestamped by the run's clock, and
answers ``reading(start_ns, end_ns)`` for a turn:

* the highest sample taken during the turn, because throttling follows the peak (M20);
* else, for a turn shorter than the interval, the latest sample before it, if it is at most
  two intervals old (plus the command's time limit): sampling that stalled gives no reading;
* None where there is no sensor, under the virtual clock (simulated time has no temperature),
  and for every turn that ends after the source failed.

A command that fails, hangs or prints garbage is reported once, with the command and what
went wrong, and the thermometer stops: a source that has printed garbage once is not trusted
again in the run, so the rest of the column is empty rather than half invented. The run
itself goes on unaffected.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pipeline.endpoints.thermal import (
    COMMAND_TIMEOUT_S,
    HWMON_ROOT,
    THERMAL_ROOT,
    ThermalError,
    read_sysfs_c,
    run_temp_command,
    sensor_files,
)

Reader = Callable[[], Awaitable[float | None]]  # one reading; None: no sensor; ThermalError: a fault
Say = Callable[[str], None]


class RunClock(Protocol):
    """The run's clock (``pipeline.clock.Clock``): samples and turns share its time."""

    @property
    def kind(self) -> str: ...

    def now_ns(self) -> int: ...


class ProbeSettings(Protocol):
    """``[probe]`` of the run's settings (``pipeline.settings.config.ProbeConfig``)."""

    @property
    def temp_command(self) -> str: ...

    @property
    def temp_interval_ms(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Sample:
    """One temperature reading and when it was taken."""

    at_ns: int  # when the reading arrived, on the run's clock
    celsius: float


def _silent(_message: str) -> None:
    pass


class Thermometer:
    """Samples the temperature in the background while a run lasts (``async with``) and gives each turn its
    reading (``reading``); ``for_run`` builds the one a run's ``[probe]`` asks for."""

    def __init__(
        self,
        read: Reader | None,
        clock: RunClock,
        interval_s: float,
        source: str,
        say: Say = _silent,
        max_age_s: float | None = None,
    ) -> None:
        """``read`` None: nothing to sample. ``max_age_s``: the oldest sample a turn may take (default: 2 intervals)."""
        self.source = source  # what the readings come from, for the run's header line
        self._read = read
        self._clock = clock
        self._interval_s = interval_s
        self._max_age_ns = round((2 * interval_s if max_age_s is None else max_age_s) * 1e9)
        self._say = say
        self._samples: list[Sample] = []
        self._problems: list[str] = []
        self._failed_at_ns: int | None = None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def for_run(
        cls,
        probe: ProbeSettings,
        clock: RunClock,
        say: Say = _silent,
        *,
        thermal_root: Path = THERMAL_ROOT,
        hwmon_root: Path = HWMON_ROOT,
        timeout_s: float = COMMAND_TIMEOUT_S,
    ) -> Thermometer:
        """The thermometer ``[probe]`` asks for: the command if one is set, else sysfs; none on the virtual clock."""
        interval_s = probe.temp_interval_ms / 1000
        if clock.kind != "real":
            return cls(None, clock, interval_s, "none (the virtual clock simulates time: no temperature)", say)
        if probe.temp_command:
            read: Reader = functools.partial(run_temp_command, probe.temp_command, timeout_s)
            return cls(read, clock, interval_s, f"command {probe.temp_command!r}", say, 2 * interval_s + timeout_s)
        if not sensor_files(thermal_root, hwmon_root):
            return cls(None, clock, interval_s, f"none (no sensor under {thermal_root} or {hwmon_root})", say)
        sysfs: Reader = functools.partial(asyncio.to_thread, read_sysfs_c, thermal_root, hwmon_root)
        return cls(sysfs, clock, interval_s, f"sysfs ({thermal_root}, {hwmon_root})", say)

    @property
    def samples(self) -> tuple[Sample, ...]:
        return tuple(self._samples)

    @property
    def problems(self) -> tuple[str, ...]:
        """What went wrong with the source, each said once when it happened."""
        return tuple(self._problems)

    async def sample(self) -> Sample | None:
        """Take one sample now and keep it; None without a source, without a sensor, or once the source failed."""
        if self._read is None or self._failed_at_ns is not None:
            return None
        try:
            celsius = await self._read()
        except (ThermalError, OSError) as exc:  # OSError: the machine refused a thread or a process
            self._fail(str(exc) if isinstance(exc, ThermalError) else f"temperature source {self.source}: {exc}")
            return None
        if celsius is None:
            return None
        taken = Sample(self._clock.now_ns(), celsius)
        self._samples.append(taken)
        return taken

    def _fail(self, problem: str) -> None:
        self._failed_at_ns = self._clock.now_ns()
        message = f"{problem}; temp_c stays empty for the rest of the run (never invented)"
        self._problems.append(message)
        self._say(message)

    async def _sample_while_running(self) -> None:
        while self._failed_at_ns is None:
            began = self._clock.now_ns()
            await self.sample()
            spent_s = (self._clock.now_ns() - began) / 1e9
            await asyncio.sleep(min(self._interval_s, max(0.0, self._interval_s - spent_s)))

    def start(self) -> None:
        """Begin sampling in the background (the first sample at once); nothing without a source."""
        if self._read is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._sample_while_running(), name="thermometer")

    async def stop(self) -> None:
        """Stop sampling; a command still running is killed."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> Thermometer:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def reading(self, start_ns: int, end_ns: int) -> float | None:
        """The turn's temperature in degrees Celsius (see the module's docstring), or None."""
        if self._failed_at_ns is not None and end_ns >= self._failed_at_ns:
            return None
        during = [s.celsius for s in self._samples if start_ns <= s.at_ns <= end_ns]
        if during:
            return max(during)
        before = [s for s in self._samples if s.at_ns < start_ns]
        if before and start_ns - before[-1].at_ns <= self._max_age_ns:
            return before[-1].celsius
        return None
