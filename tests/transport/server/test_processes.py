"""``pipeline.serve --processes N``: what is refused, each process's command line (restarted too), and two real
processes on one port ramped by ``pipeline.capacity``: every turn served by one of them, recorded in its own run,
the server's CPU probed through its parent, and nothing left running after SIGINT."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import serve
from pipeline.capacity.__main__ import main
from pipeline.endpoints.machine_load import PROC, tree_pids
from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.ramp_result import read
from pipeline.transport.server.processes import parse_process, process_argv, refusal
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
FIXTURES = ROOT / "audio_fixtures"
SIMULATOR = ROOT / "configs" / "simulator.toml"


def test_what_cannot_be_shared_is_refused() -> None:
    assert refusal(1, 0, other_doors=True) == ""  # one process serves every door, on any port
    assert refusal(2, 8000, other_doors=False) == ""
    assert refusal(0, 8000, other_doors=False) == "--processes 0: at least 1"
    assert "shares only the WebSocket port" in refusal(2, 8000, other_doors=True)
    assert "needs a fixed --port" in refusal(3, 0, other_doors=False)


def test_a_restart_limit_out_of_range_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for bad, said in (("--max-restarts=-1", "--max-restarts -1: 0 or more"), ("--restart-window-s=0", "positive")):
        assert serve.main(["--processes", "2", "--port", "8000", bad], env={}) == 2  # before any process starts
        assert said in capsys.readouterr().err


def test_each_process_is_told_its_place_its_run_and_its_folder() -> None:
    assert parse_process("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "x/2", "2"):
        with pytest.raises(ValueError, match="K/N"):
            parse_process(bad)
    argv = ["fx", "--processes", "2", "--run-id", "mine", "--out", "o"]
    # the user's --run-id and --out stay and are overridden (the parser keeps an option's last value)
    assert process_argv(argv, 2, 2, "mine", Path("o")) == [
        *argv,
        *("--process", "2/2", "--run-id", "mine-p2", "--out", str(Path("o") / "processes" / "2")),
    ]
    # restarted, it serves in the same folder as a new run: the folder's readers see it, its run id tells it apart
    assert process_argv(argv, 2, 2, "mine", Path("o"), restart=3)[-4:] == [
        *("--run-id", "mine-p2-r3", "--out", str(Path("o") / "processes" / "2")),
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(out: Path, port: int) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "pipeline.serve", str(FIXTURES), "--config", str(SIMULATOR)]
    command += ["--port", str(port), "--out", str(out), "--quiet", "--processes", "2"]
    env = {**os.environ, "ORT_DISABLE_TELEMETRY": "1"}
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert server.stdout is not None
    for line in server.stdout:  # each process's own line first, forwarded, then the parent's
        if line.startswith("serving ws://"):
            assert re.search(r"with 2 processes \(runs \S+-p1 to -p2\)", line), line
            return server
    server.kill()
    raise AssertionError(f"no server: {server.communicate(timeout=10)}")


@pytest.mark.transport
@pytest.mark.realtime
def test_two_processes_on_one_port_serve_a_ramp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    server = start(tmp_path / "server", port)
    try:
        processes = tree_pids(PROC, server.pid)[1:]
        code = main(
            [
                *(str(FIXTURES), "--config", str(SIMULATOR), "--server", f"ws://127.0.0.1:{port}/xiaozhi/v1/"),
                *("--out", str(tmp_path / "ramp"), "--steps", "1,4", "--hold", "3s", "--min-turns", "1"),
                *("--think", "0.2s", "--ramp", "0.5s", "--ids", "en10", "--server-pid", str(server.pid)),
                *("--server-traces", str(tmp_path / "server")),
            ],
            env={},
        )
    finally:
        server.send_signal(signal.SIGINT)
        _out, err = server.communicate(timeout=60)
    assert code == 0, capsys.readouterr().err
    assert server.returncode == 0, err
    assert len(processes) == 2 and not any(Path(f"/proc/{pid}").exists() for pid in processes)
    found = read(tmp_path / "ramp" / "capacity.json")
    assert [s.verdict for s in found.steps] == ["holds", "holds"]
    assert all(s.server_cpu_pct is not None and s.server_cpu_pct > 0 for s in found.steps)
    device_turns = sum(len(read_bench_csv(p)) for p in (tmp_path / "ramp" / "steps").glob("*/bench.csv"))
    served = {k: read_bench_csv(tmp_path / "server" / "processes" / k / "bench.csv") for k in ("1", "2")}
    assert sum(len(rows) for rows in served.values()) == device_turns > 0  # every turn in one process's run
    for k, rows in served.items():
        assert all(row.run_id.endswith(f"-p{k}") for row in rows)
    assert len({row.config_id for rows in served.values() for row in rows}) == 1  # the same server, twice
    traces = sorted((tmp_path / "server" / "processes").glob("*/traces/*.jsonl"))
    assert [t.parent.parent.name for t in traces] == ["1", "2"]
    assert all("processes=2" in t.read_text() for t in traces)  # lab.server.settings, and so config_id
