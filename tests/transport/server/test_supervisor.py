"""``pipeline.serve --processes 2`` when a process is killed (kill -9): it is restarted as a new segment of its run
and says it serves again, the devices of the other process keep their connections and finish their turns, the
dead one's devices see their connection cut, new devices are served, every turn is in one process's rows; past
the restart limit every process is stopped with why."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.analysis.read import rows_from_spans
from pipeline.analysis.traces import ReadProblems, read_trace_file
from pipeline.clock import RealClock, run_on_clock
from pipeline.records.bench_csv import read_bench_csv
from pipeline.run.device_side import Ask
from pipeline.transport.device.device import DeviceSettings, EmulatedDevice
from pipeline.transport.device.websocket_link import WebSocketLink
from pipeline.transport.server.restart_record import read_restarts, record_path
from tests.paths import REPO_ROOT
from tests.scenario import utterance
from tests.transport.server.test_processes import free_port

pytestmark = [pytest.mark.transport, pytest.mark.realtime]

FIXTURES = REPO_ROOT / "audio_fixtures"
SIMULATOR = REPO_ROOT / "configs" / "simulator.toml"
WAIT_S = 60.0  # a process's start, a turn: seconds each on a quiet machine, far more on a loaded one


class Supervised:
    """``pipeline.serve --processes 2`` on ``port``, its lines collected as they come."""

    def __init__(self, out: Path, port: int, *extra: str) -> None:
        command = [sys.executable, "-m", "pipeline.serve", str(FIXTURES), "--config", str(SIMULATOR)]
        command += ["--port", str(port), "--out", str(out), "--quiet", "--processes", "2", "--run-id", "run", *extra]
        env = {**os.environ, "ORT_DISABLE_TELEMETRY": "1"}
        self.proc = subprocess.Popen(
            command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.url = f"ws://127.0.0.1:{port}/xiaozhi/v1/"
        self.out, self.err = [], []  # type: tuple[list[str], list[str]]
        self._readers = [self._collect(self.proc.stdout, self.out), self._collect(self.proc.stderr, self.err)]

    @staticmethod
    def _collect(stream: object, into: list[str]) -> threading.Thread:
        def read() -> None:
            assert stream is not None
            for line in stream:  # type: ignore[attr-defined]
                into.append(line.rstrip())

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        return thread

    def wait_for(self, pattern: str, lines: list[str] | None = None, count: int = 1) -> None:
        """Until ``count`` lines match ``pattern`` (stdout unless told)."""
        seen = self.out if lines is None else lines
        deadline = time.monotonic() + WAIT_S
        while sum(bool(re.search(pattern, line)) for line in list(seen)) < count:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"no {pattern!r}: {self.out} {self.err}")
            time.sleep(0.05)

    def children(self) -> list[int]:
        text = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        return [int(pid) for pid in text.split()]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=WAIT_S)
        for reader in self._readers:
            reader.join(timeout=5)
        return code


@contextlib.contextmanager
def supervised(out: Path, *extra: str) -> Iterator[Supervised]:
    server = Supervised(out, free_port(), *extra)
    try:
        server.wait_for(r"^serving ws://")
        yield server
    finally:
        server.stop()


def holder(server_port: int, client_port: int, pids: list[int]) -> int:
    """Which of ``pids`` holds the server's end of the connection from ``client_port``."""
    inodes = {
        fields[9]
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
        if (fields := line.split())
        and int(fields[1].rsplit(":", 1)[1], 16) == server_port
        and int(fields[2].rsplit(":", 1)[1], 16) == client_port
    }
    for pid in pids:
        fds = Path(f"/proc/{pid}/fd")
        if any(os.readlink(fd).removeprefix("socket:[").removesuffix("]") in inodes for fd in fds.iterdir()):
            return pid
    raise AssertionError(f"no process holds the connection from port {client_port}")


def process_number(pid: int) -> int:
    """K of the ``--process K/N`` a child was started with."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return int(argv[argv.index(b"--process") + 1].split(b"/")[0])


def ask(question_id: str = "en10") -> Ask:
    return Ask(utterance(lead_frames=3, speech_frames=10, tail_frames=15), 13 * 60, question_id, 1, "")


def client_port(device: EmulatedDevice) -> int:
    assert isinstance(device.link, WebSocketLink) and device.link.ws is not None
    return int(device.link.ws.local_address[1])


async def until(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {WAIT_S:g} s")
        await asyncio.sleep(0.05)


async def one_device_on_each(server: Supervised, port: int) -> tuple[EmulatedDevice, EmulatedDevice, int, int]:
    """Devices connected until one is on each process: (on the first, on the second, their pids)."""
    first, second = server.children()
    on: dict[int, EmulatedDevice] = {}
    spare: list[EmulatedDevice] = []
    for i in range(16):  # the kernel picks by a hash of the ports: all 16 on one of two is 1 in 32,768
        device = EmulatedDevice(DeviceSettings(url=server.url, device_id=f"dev-{i}", mcp_wait_s=0), RealClock())
        await device.__aenter__()
        pid = holder(port, client_port(device), [first, second])
        if pid in on:
            spare.append(device)
        else:
            on[pid] = device
        if len(on) == 2:
            break
    for device in spare:
        await device.__aexit__(None, None, None)
    return on[first], on[second], first, second


def test_a_killed_process_is_restarted_and_the_other_keeps_its_devices(tmp_path: Path) -> None:
    out = tmp_path / "server"
    pids: list[int] = []
    with supervised(out) as server:
        port = int(server.url.split(":")[2].split("/")[0])

        async def scenario() -> tuple[list[str], int]:
            victim, survivor, victim_pid, _ = await one_device_on_each(server, port)
            assert (await victim.turn(ask())).ok  # a row in the segment about to die, once the server wrote it
            victim_k = process_number(victim_pid)
            await until(lambda: len(read_bench_csv(out / "processes" / str(victim_k) / "bench.csv")) == 1, "written")
            os.kill(victim_pid, signal.SIGKILL)
            await until(lambda: not victim.link.is_open, "the dead process's device cut")
            after = await survivor.turn(ask())  # on the survivor, its connection kept
            assert after.ok and survivor.reconnects == 0, after.error_message
            await asyncio.to_thread(server.wait_for, rf"^\[p{victim_k}\] serving ws://\S+ \(run run-p{victim_k}-r1\)")
            # the cut device connects again, and new ones come: each lands on the survivor or the restart
            fresh = [
                EmulatedDevice(DeviceSettings(url=server.url, device_id=f"new-{i}"), RealClock()) for i in range(3)
            ]
            await asyncio.gather(*(device.__aenter__() for device in fresh))
            timelines = await asyncio.gather(*(d.turn(ask()) for d in [victim, *fresh]))
            assert victim.reconnects == 1
            for device in [victim, survivor, *fresh]:
                await device.__aexit__(None, None, None)
            pids.extend([victim_pid, *server.children()])
            return [t.error_message for t in timelines], victim_k

        errors, killed = run_on_clock(scenario(), RealClock())
        assert errors == ["", "", "", ""]
    assert server.proc.returncode == 0, server.err
    assert len(pids) == 3 and not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert sum(line.startswith("serving ws://") for line in server.out) == 1  # said once, not at the restart
    said = [line for line in server.err if "ended by itself" in line]
    assert said == [
        f"warning: process {killed} of 2 ended by itself (killed by SIGKILL); restarted as run run-p{killed}-r1, "
        "its restart 1 (1 of at most 5 in 300 s)"
    ]
    record = read_restarts(record_path(out, "run"))
    assert [(r.process, r.restart, r.ended_run_id, r.run_id, r.returncode) for r in record.restarts] == [
        (killed, 1, f"run-p{killed}", f"run-p{killed}-r1", -9)
    ]
    assert record.restarts[0].listening_after_s is not None and record.restarts[0].listening_after_s > 0
    assert record.gave_up == ""
    # every turn the devices finished is one row of one segment, the dead one's row kept and read again
    rows = {k: read_bench_csv(out / "processes" / str(k) / "bench.csv") for k in (1, 2)}
    assert sum(len(r) for r in rows.values()) == 6 and all(row.ok == 1 for r in rows.values() for row in r)
    other = 3 - killed
    assert [row.run_id for row in rows[killed]].count(f"run-p{killed}") == 1  # the turn before the kill
    assert {row.run_id for row in rows[killed]} <= {f"run-p{killed}", f"run-p{killed}-r1"}
    assert {row.run_id for row in rows[other]} == {f"run-p{other}"}
    dead_trace = out / "processes" / str(killed) / "traces" / f"run-p{killed}.jsonl"
    problems = ReadProblems()
    assert len(rows_from_spans(read_trace_file(dead_trace, problems))) == 1 and not problems.messages


def test_past_the_restart_limit_every_process_is_stopped(tmp_path: Path) -> None:
    out = tmp_path / "server"
    with supervised(out, "--max-restarts", "1", "--restart-window-s", "600") as server:
        first, second = sorted(server.children(), key=process_number)
        os.kill(first, signal.SIGKILL)
        server.wait_for(r"^\[p1\] serving ws://\S+ \(run run-p1-r1\)")
        restarted = [pid for pid in server.children() if pid != second]
        assert [process_number(pid) for pid in restarted] == [1]
        os.kill(restarted[0], signal.SIGKILL)
        assert server.proc.wait(timeout=WAIT_S) == 1
        children = [first, second, *restarted]
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)
    why = (
        "process 1 of 2 ended by itself (killed by SIGKILL) with 1 restart(s) already in the last 600 s "
        "(--max-restarts 1 in --restart-window-s 600): stopping every process"
    )
    assert f"error: {why}" in server.err
    record = read_restarts(record_path(out, "run"))
    assert record.gave_up == why and [r.run_id for r in record.restarts] == ["run-p1-r1"]
