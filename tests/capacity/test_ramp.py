"""Bad input to ``python -m pipeline.capacity``: a clear message, what was measured written, exit non-zero; and the
step window on the virtual clock. Loopback only; every server a test starts, it stops."""

from __future__ import annotations

import asyncio
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.capacity import ramp as ramp_module
from pipeline.capacity.__main__ import main
from pipeline.capacity.users import Window
from pipeline.clock import VirtualClock, run_on_clock
from pipeline.records.ramp_result import Quantiles, Step, read
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
FIXTURES = ROOT / "audio_fixtures"
SIMULATOR = ROOT / "configs" / "simulator.toml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Closer(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.close()  # accepts the connection and says nothing: every device's session is cut


@pytest.fixture
def closing_server() -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Closer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"ws://127.0.0.1:{server.server_address[1]}/xiaozhi/v1/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def args(out: Path, server: str, *extra: str) -> list[str]:
    return [str(FIXTURES), "--config", str(SIMULATOR), "--server", server, "--out", str(out), "--hold", "8s", *extra]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--think=-1s"], "--think '-1s': a duration"),
        (["--listen-mode", "manual"], "[load] listen_mode = 'manual': one of realtime, auto"),
        (["--think", "2s", "--per-hour", "60"], "give one of the two"),
        (["--steps", "1,5,2"], "--steps: 2 after 5: the steps must increase"),
        (["--steps", "0,2"], "--steps: 0 devices: every step needs at least 1 device"),
        (["--hold", "1s"], "--hold 1s: shorter than a turn"),
        (["--ids", "nope"], "[load] ids: nope not in"),
        (["--server-pid", "999999999"], "--server-pid 999999999: no process"),
        (["--soak", "60s", "--steps", "1,2"], "--soak holds one step: --steps '1,2' names 2; give one"),
        (["--soak", "60s", "--steps", "2", "--window", "2m"], "--window '2m': more than 0 and at most --soak '60s'"),
        (["--soak", "soon", "--steps", "2"], "--soak 'soon': a duration"),
        (["--soak", "60s", "--steps", "2", "--workers", "2"], "--workers is not supported with it"),
    ],
)
def test_impossible_values_stop_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    port = free_port()  # nothing listens: a check that reached the network would fail differently
    assert main([*args(tmp_path / "out", f"ws://127.0.0.1:{port}/xiaozhi/v1/"), *extra], env={}) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "out" / "steps").exists()


def test_a_bad_profile_file_names_its_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text("[load]\nthink_s = -2\n")
    assert main([*args(tmp_path / "out", "ws://127.0.0.1:1/"), "--profile", str(profile)], env={}) == 2
    assert "[load] think_s = -2.0: 0 or more seconds" in capsys.readouterr().err


def test_an_unreachable_server_is_said_and_nothing_measured_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"ws://127.0.0.1:{free_port()}/xiaozhi/v1/"
    assert main(args(tmp_path, url), env={}) == 2
    err = capsys.readouterr().err
    assert f"error: server {url} unreachable" in err
    found = read(tmp_path / "capacity.json")
    assert found.steps == [] and "unreachable" in found.stopped and found.devices_held is None
    assert (tmp_path / "steps.csv").read_text().count("\n") == 1  # the header alone


def test_a_server_that_closes_every_connection(
    tmp_path: Path, closing_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args(tmp_path, closing_server), env={}) == 2
    assert f"error: server {closing_server} unreachable: {closing_server}: refused" in capsys.readouterr().err
    assert read(tmp_path / "capacity.json").steps == []


def _step(devices: int) -> Step:
    q = Quantiles(p50=900.0, p90=1000.0, p99=1100.0)
    failures = {"no_answer": 0, "cut_connection": 0, "refused": 0, "other": 0}
    reason = "the baseline"
    return Step(
        devices, "r", "c", "steps/1", 20, failures, q, 2.0, 3.0, 8.0, None, None, 0, None, None, "holds", reason
    )


def test_a_step_that_cannot_start_its_devices_keeps_the_steps_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_step = ramp_module.Ramp.step

    def step(self: ramp_module.Ramp, n: int) -> Step:
        return _step(n) if n == 1 else real_step(self, n)

    def no_devices(*_a: object, **_k: object) -> None:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(ramp_module.Ramp, "step", step)
    monkeypatch.setattr(ramp_module, "prepare_step", no_devices)
    monkeypatch.setattr(ramp_module, "reachable", lambda *_a: None)
    monkeypatch.setattr("pipeline.capacity.__main__.reachable", lambda *_a: None)
    assert main([*args(tmp_path, "ws://127.0.0.1:1/xiaozhi/v1/"), "--steps", "1,2"], env={}) == 2
    err = capsys.readouterr().err
    assert "step of 2 device(s) could not start: [Errno 24] Too many open files" in err
    assert "steps measured: 1" in err
    found = read(tmp_path / "capacity.json")
    assert [s.devices for s in found.steps] == [1] and found.devices_held == 1
    assert "could not start" in found.stopped
    assert (tmp_path / "steps.csv").read_text().splitlines()[1].startswith("1,holds,20,900.0,1000.0,1100.0")


def test_the_window_holds_then_extends_until_enough_turns_on_the_virtual_clock() -> None:
    async def check() -> None:
        clock = VirtualClock()
        start = clock.now_ns()
        window = Window(clock, start + 2_000_000_000, hold_s=10, max_hold_s=30, min_turns=3)
        window.measured = 3
        seen = []
        for at in (11.999, 12.0):  # arrived at 2 s; a 10 s hold with enough turns ends at 12 s
            await asyncio.sleep(at - (clock.now_ns() - start) / 1e9)
            seen.append(window.asking())
        window.measured = 2  # too few: held on, up to 30 s after the arrival
        seen.append(window.asking())
        await asyncio.sleep(20)  # 32 s: the longest hold is over
        seen.append(window.asking())
        assert seen == [True, False, True, False]
        window.ended_ns = start + int(31.5e9)
        assert window.held_s == 29.5

    run_on_clock(check(), VirtualClock())


@pytest.mark.realtime
def test_a_first_step_that_answers_nothing_is_written_and_stops_the_ramp(
    tmp_path: Path, closing_server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("pipeline.capacity.__main__.reachable", lambda *_a: None)  # past the first check
    extra = ["--steps", "1,2", "--hold", "3s", "--think", "1s", "--ramp", "0s", "--min-turns", "1", "--ids", "en10"]
    assert main([*args(tmp_path, closing_server)[:-2], *extra], env={}) == 2
    err = capsys.readouterr().err
    assert "error: 1 device(s): no turn was answered" in err and "steps measured: 1" in err
    found = read(tmp_path / "capacity.json")
    assert [s.devices for s in found.steps] == [1]
    only = found.steps[0]
    assert only.verdict == "fails" and only.failures["refused"] == only.turns >= 3  # one a second for 3 s
    assert found.devices_held is None
    assert (tmp_path / "steps.csv").read_text().splitlines()[1].startswith("1,fails,")
