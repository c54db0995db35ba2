"""``python -m pipeline.capacity`` against the lab's own server (``pipeline.serve``, scripted stages, its own process)
over WebSocket (realtime listening) and over MQTT + UDP (auto): two short steps each, every figure from the steps'
traces, the server's CPU and RSS by its PID, and the server stopped afterwards."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.analysis.read import read_traces
from pipeline.analysis.traces import trace_files
from pipeline.capacity.__main__ import main
from pipeline.records import soak_result
from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.ramp_result import read
from tests.paths import REPO_ROOT

pytestmark = [pytest.mark.transport, pytest.mark.realtime]

ROOT = REPO_ROOT
FIXTURES = ROOT / "audio_fixtures"
SIMULATOR = ROOT / "configs" / "simulator.toml"
KEY = "Lab-signature-Key9"


def start_server(out: Path) -> tuple[subprocess.Popen[str], str, str]:
    command = [sys.executable, "-m", "pipeline.serve", str(FIXTURES), "--config", str(SIMULATOR), "--port", "0"]
    command += ["--out", str(out), "--quiet", "--mqtt-port", "0", "--mqtt-signature-key-env", "LAB_MQTT_KEY"]
    env = {**os.environ, "LAB_MQTT_KEY": KEY, "ORT_DISABLE_TELEMETRY": "1"}
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert server.stdout is not None
    ws = re.search(r"serving (ws://\S+)", server.stdout.readline())
    mqtt = re.search(r"serving (mqtt://\S+) with audio on udp://", server.stdout.readline())
    if ws is None or mqtt is None:
        server.kill()
        raise AssertionError(f"no server: {server.communicate(timeout=10)}")
    return server, ws.group(1), mqtt.group(1)


def ramp(out: Path, url: str, pid: int) -> list[str]:
    return [
        *(str(FIXTURES), "--config", str(SIMULATOR), "--server", url, "--out", str(out)),
        *("--steps", "1,2", "--hold", "3s", "--min-turns", "1", "--think", "0.2s", "--ramp", "0.5s"),
        *("--ids", "en10", "--server-pid", str(pid), "--label", "lab server"),
    ]


def test_the_lab_server_ramped_over_both_transports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server, ws, mqtt = start_server(tmp_path / "server")
    try:
        codes = {
            "websocket": main(
                [*ramp(tmp_path / "ws", ws, server.pid), "--server-traces", str(tmp_path / "server" / "traces")], env={}
            ),
            "mqtt": main(
                [*ramp(tmp_path / "mqtt", mqtt, server.pid), "--listen-mode", "auto"], env={"MQTT_SIGNATURE_KEY": KEY}
            ),
        }
    finally:
        server.send_signal(signal.SIGINT)
        _out, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
    assert codes == {"websocket": 0, "mqtt": 0}, capsys.readouterr().err
    said = capsys.readouterr().out
    assert said.count("devices held: ") == 2
    for folder, transport, row_transport, mode in (
        ("ws", "websocket", "websocket", "realtime"),
        ("mqtt", "mqtt+udp", "udp", "auto"),
    ):
        found = read(tmp_path / folder / "capacity.json")
        assert found.transport == transport and found.label == "lab server" and found.profile["ids"] == ["en10"]
        assert found.profile["listen_mode"] == mode
        assert [s.devices for s in found.steps][:1] == [1] and found.steps[0].verdict == "holds"
        assert found.devices_held is not None and found.devices_held >= 1
        assert len({s.config_id for s in found.steps}) == len(found.steps)  # the device count is in the identity
        for s in found.steps:
            rows = read_bench_csv(tmp_path / folder / s.folder / "bench.csv")
            assert {r.devices for r in rows} == {s.devices} and {r.run_id for r in rows} == {s.run_id}
            assert all(r.ok == 1 and r.transport == row_transport for r in rows)
            assert ("listen mode realtime" in rows[0].llm_endpoint) is (mode == "realtime")  # auto: the firmware's
            assert s.turns == sum(1 for r in rows if not r.warmup) >= 1
            assert s.failures == {"no_answer": 0, "cut_connection": 0, "refused": 0, "other": 0}
            assert s.silence_ms.p50 is not None and s.silence_ms.p50 > 0
            # the step's traces read back into the very rows its bench.csv holds
            traces = trace_files(tmp_path / folder / s.folder / "traces")
            assert read_traces(traces, workers=1).rows == sorted(rows, key=lambda r: r.turn_start_ns)
            # the server is this machine's process: its CPU and RSS are measured, never invented
            assert s.server_cpu_pct is not None and s.server_cpu_pct >= 0
            assert s.server_rss_mb is not None and s.server_rss_mb > 10
        lines = (tmp_path / folder / "steps.csv").read_text().splitlines()
        assert lines[0].startswith("devices,verdict,turns,silence_p50_ms") and len(lines) == 1 + len(found.steps)


def test_a_soak_of_the_lab_server_is_written_window_by_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server, ws, _mqtt = start_server(tmp_path / "server")
    soak = [
        *(str(FIXTURES), "--config", str(SIMULATOR), "--server", ws, "--out", str(tmp_path / "soak")),
        *("--steps", "2", "--soak", "12s", "--window", "4s", "--think", "0.2s", "--ramp", "0.5s", "--ids", "en10"),
        *("--server-pid", str(server.pid), "--server-traces", str(tmp_path / "server" / "traces")),
    ]
    try:
        code = main(soak, env={})
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)
    said = capsys.readouterr().out
    assert code == 0, said
    found = soak_result.read(tmp_path / "soak" / "soak.json")
    assert (found.devices, found.duration_s, found.window_s) == (2, 12.0, 4.0)
    assert [w.index for w in found.windows] == [1, 2, 3] and said.count("window ") == 4  # the last said again, folded
    for w in found.windows:
        # the server is this machine's process: its figures are measured in every window, never invented
        assert w.rss_min_mb is not None and w.rss_max_mb is not None and 10 < w.rss_min_mb <= w.rss_max_mb
        assert w.fds_max is not None and w.fds_max > 3 and w.threads_max is not None and w.threads_max >= 1
        assert w.server_cpu_pct is not None and w.server_traces_mb is not None
        assert w.machine is not None and w.machine.json_ms > 0
    assert found.windows[-1].device_traces_mb > 0 and sum(w.turns for w in found.windows) > 0
    assert [c.figure for c in found.drift] == ["silence_p50_ms", "silence_p90_ms", "rss_mb", "fds", "threads"]
    capacity = read(tmp_path / "soak" / "capacity.json")
    assert capacity.drift and f"soak: {capacity.drift}" in said
    (step,) = capacity.steps
    assert step.machine is not None and step.turns == sum(w.turns for w in found.windows)
    rows = soak_result.read_windows(tmp_path / "soak" / "windows.csv")
    assert [r.turns for r in rows] == [w.turns for w in found.windows]
