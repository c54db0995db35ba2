"""A soak: one step of N devices held for a long time, cut into windows, each written as it ends.

``pipeline.capacity FIXTURES --server URL --steps N --soak 60m --window 5m --out DIR`` runs one step as a
ramp's (the same devices, users, traces and bench.csv under DIR/steps/<N>/, the same verdict in
capacity.json) held ``--soak`` after the last device arrived, and watches it (``Soaking``, the ramp's
``watch``): at each window's end it reads the turns that finished in the window (warm-ups left out) from the
step's own rows, the server from /proc (``ServerProbe.take_window``: CPU, RSS, descriptors, threads), the
trace folders' sizes and the machine's speed, and replaces DIR/soak.json and DIR/windows.csv; the drift
checks (``soak_drift``) are made again over every window so far, and their verdict is written into
capacity.json's ``drift``. A soak stopped midway keeps every window it finished.

Turns still running when the hold ends finish after the last boundary; they are folded into the last
window (their rows and the generator's lateness; the server's readings stay the window's own, taken at its
boundary) rather than making a window of their own, whose few turns would give the drift check a last value
resting on a handful of turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec.structs
import numpy as np

from pipeline.analysis.row_sink import RowSink
from pipeline.capacity import soak_drift, step_verdict
from pipeline.capacity.probe import ServerProbe
from pipeline.clock import VirtualEventLoop
from pipeline.records import soak_result
from pipeline.records.ramp_result import Capacity, MachineSpeed
from pipeline.records.soak_result import Soak, SoakWindow
from pipeline.records.turn_row import TurnRow
from pipeline.transport.device.pacer import SendLateness

Say = Callable[[str], None]
Speed = Callable[[], "MachineSpeed | None"]


def folder_mb(folder: Path | None) -> float | None:
    """The bytes of every file under ``folder``, in MiB; None when it is not there."""
    if folder is None or not folder.is_dir():
        return None
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):  # a file renamed or removed while walking
                total += os.stat(os.path.join(root, name)).st_size
    return total / 2**20


@dataclass
class Soaking:
    """Watches one step's hold window by window (``Ramp.watch``); ``soak`` is what it wrote so far."""

    out: Path
    soak: Soak
    found: Capacity
    device_traces: Path
    server_traces: Path | None = None
    speed: Speed | None = None  # the machine's speed at each window's end (None: not measured)
    say: Say = print
    _rows: list[TurnRow] = field(default_factory=list)  # the last window's, for the tail folded into it
    _late: list[np.ndarray] = field(default_factory=list)
    _held: bool = False  # the window that ends with the hold is written: what comes after is its tail

    @classmethod
    def begin(
        cls,
        out: Path,
        devices: int,
        hold_s: float,
        window_s: float,
        ramp_id: str,
        found: Capacity,
        server_traces: Path | None,
        speed: Speed | None,
    ) -> Soaking:
        """The watcher of a soak of ``devices`` into ``out``, its step's run and folder named as the ramp names them."""
        run_id, folder = f"{ramp_id}-{devices}d", f"steps/{devices}"
        soak = Soak(devices, hold_s, window_s, run_id, folder)
        return cls(out, soak, found, out / folder / "traces", server_traces, speed)

    async def __call__(self, sink: RowSink, probe: ServerProbe, record: SendLateness) -> list[np.ndarray]:
        start_ns = _now_ns()
        probe.take_window()  # the first window begins at the last arrival
        self._late.append(record.take())  # sent while the devices arrived: the step's, no window's
        index = 1
        try:
            while (index - 1) * self.soak.window_s < self.soak.duration_s:
                due_s = min(index * self.soak.window_s, self.soak.duration_s)  # the last window ends with the hold
                await asyncio.sleep(max(0.0, (start_ns + int(due_s * 1e9) - _now_ns()) / 1e9))
                await self._close(index, start_ns, sink, probe, record, tail=False)
                index += 1
            await asyncio.Future()  # the devices finish their last turns: until the ramp stops this watch
        except asyncio.CancelledError:  # the hold is over and every device has stopped: the tail
            await self._close(index, start_ns, sink, probe, record, tail=True)
        return self._late

    async def _close(
        self, index: int, start_ns: int, sink: RowSink, probe: ServerProbe, record: SendLateness, tail: bool
    ) -> None:
        # the machine's speed first: the one wait, so a stop that comes during it finds nothing taken yet
        speed = None if tail or self.speed is None else await _off_loop(self.speed)
        rows, sink.rows[:] = list(sink.rows), []  # an hour's rows are not kept: each window reads its own
        late = record.take()
        self._late.append(late)
        reading = probe.take_window()
        end_s = round((_now_ns() - start_ns) / 1e9, 3)
        if tail and self._held:  # the turns that ended after the hold join the last window
            last = self.soak.windows.pop()
            merged = self._figures(last.index, self._rows + rows, np.concatenate(self._late[-2:]))
            self._write(msgspec.structs.replace(last, end_s=end_s, **merged), folded=True)
            return
        if tail and not rows:
            return
        self._rows = rows
        self._held = (index * self.soak.window_s) >= self.soak.duration_s
        window = SoakWindow(
            index=index,
            start_s=round((index - 1) * self.soak.window_s, 3),
            end_s=end_s,
            **self._figures(index, rows, late),
            server_cpu_pct=_round(reading.cpu_pct, 1),
            rss_min_mb=_round(reading.rss_min_mb),
            rss_max_mb=_round(reading.rss_max_mb),
            fds_max=reading.fds_max,
            threads_max=reading.threads_max,
            device_traces_mb=_round(folder_mb(self.device_traces)) or 0.0,
            server_traces_mb=_round(folder_mb(self.server_traces)),
            machine=speed,
        )
        self._write(window)

    def _figures(self, index: int, rows: list[TurnRow], late: np.ndarray) -> dict[str, Any]:
        """A window's turn figures: measured turns, failures by kind, the silence, the generator's lateness."""
        fig = step_verdict.figures(rows, name=f"{self.soak.run_id}|window{index}")
        return {
            "turns": fig.turns,
            "failures": fig.failures,
            "silence_ms": fig.silence_ms,
            "lateness_p99_ms": step_verdict.lateness(late)[1],
        }

    def _write(self, window: SoakWindow, folded: bool = False) -> None:
        self.soak.windows.append(window)
        self.soak.drift = soak_drift.checks(self.soak.windows)
        self.soak.drifted = any(c.flagged for c in self.soak.drift)
        self.found.drift = soak_drift.verdict(self.soak.drift)
        soak_result.write(self.out, self.soak)
        self.say(window_line(window) + (" (the turns that ended after the hold folded in)" if folded else ""))


def _now_ns() -> int:
    # the loop's own time: the run's clock on a real loop, virtual time on the virtual one (the tests')
    return int(asyncio.get_running_loop().time() * 1e9)


async def _off_loop(speed: Speed) -> MachineSpeed | None:
    loop = asyncio.get_running_loop()
    if isinstance(loop, VirtualEventLoop):  # virtual time would jump ahead while the loop waited for a thread
        return speed()
    # the probe's work would otherwise stall every device's paced sends while it runs (0.1-0.3 s here)
    return await loop.run_in_executor(None, speed)


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def window_line(w: SoakWindow) -> str:
    """One line per window, as the ramp prints one per step."""
    q = w.silence_ms
    ms = "/".join("-" if v is None else f"{v:.0f}" for v in (q.p50, q.p90))
    failed = sum(w.failures.values())
    server = ""
    if w.rss_max_mb is not None:
        cpu = "-" if w.server_cpu_pct is None else f"{w.server_cpu_pct:.0f} %"
        server = f", server CPU {cpu}, RSS {w.rss_max_mb:.0f} MiB, {w.fds_max} fds, {w.threads_max} threads"
    return (
        f"window {w.index:>3} ({w.start_s:.0f}-{w.end_s:.0f} s): silence P50/P90 {ms} ms, {w.turns} turn(s), "
        f"{failed} failed{server}, traces {w.device_traces_mb:.1f} MiB"
    )
