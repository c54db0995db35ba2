"""A soak's windows on the virtual clock: boundaries, the turns that finished in each, the tail folded into the
last window, and the records written at each window's end and read back; with devices that take a fixed time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from pipeline.capacity.probe import ServerProbe
from pipeline.capacity.profile import LoadProfile
from pipeline.capacity.ramp import _stopped
from pipeline.capacity.soak import Soaking, window_line
from pipeline.capacity.users import Window
from pipeline.clock import run_on_clock
from pipeline.records import soak_result
from pipeline.records.ramp_result import Capacity, MachineSpeed
from pipeline.records.soak_result import Soak
from pipeline.transport.device.pacer import send_lateness
from tests.capacity.test_users import START_NS, users_of

SPEED = MachineSpeed(json_ms=1.5, socket_ms=2.5, opus_ms=3.5, onnx_ms=None)


def soak(tmp_path: Path, hold_s: float, window_s: float) -> tuple[Soak, list[str], Window]:
    """Two devices (arriving at 0 and 1 s), 4 s turns, 1 s thinking, held ``hold_s`` and watched in windows."""
    said: list[str] = []
    found = Capacity("ws://x", "websocket", "f", {}, [2], hold_s, hold_s, 10.0, 50.0, 1)
    record = Soak(2, hold_s, window_s, "soak-2d", "steps/2")
    watcher = Soaking(tmp_path / "cap", record, found, tmp_path / "traces", speed=lambda: SPEED, say=said.append)
    profile = LoadProfile(arrival="staggered", ramp_s=2, think_s=1)
    users, sink, clock = users_of(tmp_path, profile, devices=2, hold_s=hold_s)

    async def go() -> Window:
        START_NS[0] = clock.now_ns()
        late = send_lateness()
        late.record(0.5)  # before the arrival: not the soak's
        watching: list[asyncio.Task[list[np.ndarray]]] = []

        def arrived() -> None:
            watching.append(asyncio.create_task(watcher(sink, ServerProbe(None), late)))

        window = await users.run_step(arrived=arrived)
        await _stopped(watching)
        return window

    window = run_on_clock(go(), clock)
    users.tracing.shutdown()
    return record, said, window


def test_windows_hold_the_turns_that_finished_in_them_and_the_tail_joins_the_last(tmp_path: Path) -> None:
    record, said, window = soak(tmp_path, hold_s=30, window_s=10)
    # the windows start at the last arrival (1 s). Device 0 asks at 0, 5, ..., 30 (turn ends 4, 9, ..., 34);
    # device 1 at 1, 6, ..., 26 (ends 5, 10, ..., 30); each one's first turn is its warm-up, left out.
    # [1, 11): ends 9, 10; [11, 21): 14, 15, 19, 20; [21, 31): 24, 25, 29, 30, and the tail: 34, after which
    # device 0 thinks its 1 s and stops at 35 (34 s in): the last window ends when the last device stopped
    assert [(w.index, w.start_s, w.end_s, w.turns) for w in record.windows] == [
        (1, 0.0, 10.0, 2),
        (2, 10.0, 20.0, 4),
        (3, 20.0, 34.0, 5),
    ]
    assert window.measured == 11
    assert all(w.failures == {"no_answer": 0, "cut_connection": 0, "refused": 0, "other": 0} for w in record.windows)
    assert all(w.machine == SPEED for w in record.windows)
    # no server PID: its figures are not measured, never zero; these devices send no paced audio
    assert {(w.server_cpu_pct, w.rss_max_mb, w.fds_max, w.threads_max, w.lateness_p99_ms) for w in record.windows} == {
        (None, None, None, None, None)
    }
    assert record.windows[-1].device_traces_mb > record.windows[0].device_traces_mb > 0
    assert len(said) == 4 and said[-1].endswith("(the turns that ended after the hold folded in)")
    assert said[0] == window_line(record.windows[0])


def test_each_window_is_written_and_reads_back(tmp_path: Path) -> None:
    record, _said, _window = soak(tmp_path, hold_s=20, window_s=10)
    again = soak_result.read(tmp_path / "cap" / "soak.json")
    assert again == record and [w.index for w in again.windows] == [1, 2]
    rows = soak_result.read_windows(tmp_path / "cap" / "windows.csv")
    assert [(r.window, r.turns, r.machine_json_ms, r.machine_onnx_ms) for r in rows] == [
        (1, 2, 1.5, None),
        (2, 5, 1.5, None),
    ]
    # two windows, and no silence or server figure: nothing the drift checks could judge
    assert not again.drifted and all(c.reason.startswith("not checked") for c in again.drift)


def test_a_hold_shorter_than_a_window_is_one_window(tmp_path: Path) -> None:
    record, _said, _window = soak(tmp_path, hold_s=12, window_s=60)
    # the window ends with the hold (12 s after the last arrival), then the devices' last turns fold into it:
    # device 1 asks at 11, ends at 15 and stops after thinking, at 16 (15 s in)
    assert [(w.index, w.start_s, w.end_s, w.turns) for w in record.windows] == [(1, 0.0, 15.0, 4)]
