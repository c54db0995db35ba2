"""One temperature reading, from sysfs or from a user's command, or none (METHOD M9, M20: never invent it).

Two sources. Linux exposes sensors as ``/sys/class/thermal/thermal_zone*/temp`` and
``/sys/class/hwmon/hwmon*/temp*_input``, both in millidegrees Celsius; the hottest
plausible one is the reading. A board the pipeline talks to (a phone, a Jetson reached
over ssh) has its own sensor, which a user's shell command can print in degrees Celsius.
A sensor that cannot be read gives no reading; a command that fails, hangs or prints
anything but one plausible number raises ``ThermalError`` with a message that says what
happened and what was expected. ``pipeline.endpoints.thermometer`` samples these during a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
from pathlib import Path

THERMAL_ROOT = Path("/sys/class/thermal")
HWMON_ROOT = Path("/sys/class/hwmon")
# Outside this a value is a fault, not a temperature: sensors report -128, 255 or -273.15 when
# disconnected, and sysfs millidegrees printed as degrees land in the tens of thousands.
PLAUSIBLE_C = (-40.0, 150.0)
COMMAND_TIMEOUT_S = 5.0  # an ssh connection is made well within this; beyond it the command is hung
_SHOWN_CHARS = 60  # of a command's output or error, quoted in a message


class ThermalError(RuntimeError):
    """The temperature command failed, hung or printed something that is not a temperature."""


def plausible(celsius: float) -> bool:
    low, high = PLAUSIBLE_C
    return math.isfinite(celsius) and low <= celsius <= high


def sensor_files(thermal_root: Path = THERMAL_ROOT, hwmon_root: Path = HWMON_ROOT) -> list[Path]:
    """Every sysfs file that holds a temperature in millidegrees."""
    return sorted(thermal_root.glob("thermal_zone*/temp")) + sorted(hwmon_root.glob("hwmon*/temp*_input"))


def read_sysfs_c(thermal_root: Path = THERMAL_ROOT, hwmon_root: Path = HWMON_ROOT) -> float | None:
    """The hottest plausible sensor in degrees Celsius, or None where no sensor can be read."""
    temps = [t for f in sensor_files(thermal_root, hwmon_root) if (t := _millidegrees(f)) is not None]
    return max(temps) if temps else None


def _millidegrees(path: Path) -> float | None:
    try:
        celsius = int(path.read_text().strip()) / 1000
    except (OSError, ValueError):  # a zone that is off or gone reads as an error: no reading, not a fault
        return None
    return celsius if plausible(celsius) else None


def parse_celsius(command: str, output: str) -> float:
    """The one number a temperature command printed, in degrees Celsius; ThermalError for anything else."""
    text = output.strip()
    if not text:
        raise ThermalError(f"temperature command {command!r} printed nothing: it should print one number, e.g. 47.5")
    try:
        celsius = float(text)
    except ValueError:
        raise ThermalError(
            f"temperature command {command!r} printed {_shown(text)}, not a number: "
            "it should print degrees Celsius alone, e.g. 47.5"
        ) from None
    if not plausible(celsius):
        low, high = PLAUSIBLE_C
        hint = " (sysfs gives millidegrees: divide by 1000)" if abs(celsius) >= 1000 else ""
        raise ThermalError(
            f"temperature command {command!r} printed {_shown(text)}: not a temperature between "
            f"{low:g} and {high:g} °C{hint}"
        )
    return celsius


async def run_temp_command(command: str, timeout_s: float = COMMAND_TIMEOUT_S) -> float:
    """Run ``command`` in a shell, without blocking the event loop, and parse what it printed."""
    proc = await _spawn(command)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except BaseException as exc:  # a timeout, or the run ended: nothing the command started may outlive it
        await _kill(proc)
        if isinstance(exc, TimeoutError):
            raise ThermalError(
                f"temperature command {command!r} gave no answer within {timeout_s:g} s: stopped it"
            ) from None
        raise
    if proc.returncode != 0:
        raise ThermalError(f"temperature command {command!r} failed ({_exit(proc.returncode)}){_said(err)}")
    return parse_celsius(command, out.decode(errors="replace"))


async def _spawn(command: str) -> asyncio.subprocess.Process:
    # Its own session, so a timeout can stop the whole group (the shell and the ssh it started);
    # no stdin, so ssh cannot wait for a password or swallow ours.
    spawning = asyncio.ensure_future(
        asyncio.create_subprocess_shell(
            command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    )
    try:
        # Shielded: cancelled half-way, asyncio would kill the shell alone and wait for whatever
        # it started (a ``sleep``, a stuck ssh) to close the pipes.
        return await asyncio.shield(spawning)
    except OSError as exc:
        raise ThermalError(f"temperature command {command!r} could not start: {exc}") from None
    except asyncio.CancelledError:
        with contextlib.suppress(OSError):
            await _kill(await spawning)
        raise


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """Kill the command's whole process group and reap the shell."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone, its id reused
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


def _exit(code: int | None) -> str:
    if code == 127:
        return "exit 127: command not found"
    if code is not None and code < 0:
        return f"killed by signal {-code}"
    return f"exit {code}"


def _said(stderr: bytes) -> str:
    lines = stderr.decode(errors="replace").strip().splitlines()
    return f": {_shown(lines[-1])}" if lines else ""


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "…")
