"""Other load on the machine: the CPU time other processes used during a turn, from /proc, exactly on a
synthetic /proc and for real beside a busy process; the report flags the turns it made unreliable."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pipeline.endpoints.machine_load import LoadProbe
from pipeline.replay import main
from pipeline.report.build import build
from pipeline.report.load import load_paths
from tests.fixture_files import make_fixtures
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT


def write_proc(root: Path, busy: int, processes: dict[int, tuple[int, int]], load: str = "0.50") -> None:
    """``processes``: pid -> (ppid, utime ticks)."""
    root.mkdir(exist_ok=True)
    (root / "stat").write_text(f"cpu  {busy} 0 0 999999 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n")
    (root / "loadavg").write_text(f"{load} 0.40 0.30 1/100 1234\n")
    for pid, (ppid, utime) in processes.items():
        (root / str(pid)).mkdir(exist_ok=True)
        (root / str(pid) / "stat").write_text(
            f"{pid} (a name (with) spaces) S {ppid} 1 1 0 -1 0 0 0 0 0 {utime} 0 0 0\n"
        )


def test_other_cpu_is_the_machines_cpu_time_minus_this_process_tree(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    # 100 = us, 101 = our llama-server, 200 = someone else's process
    write_proc(proc, busy=1000, processes={100: (1, 50), 101: (100, 10), 200: (1, 5)})
    probe = LoadProbe(proc, pid=100)
    start = probe.sample()
    write_proc(proc, busy=1300, processes={100: (1, 120), 101: (100, 60), 200: (1, 185)}, load="1.75")
    load = probe.between(start, probe.sample())
    assert load is not None
    assert load.other_cpu_ms == (300 - 70 - 50) * probe.tick_ms  # machine 300 ticks, ours 120
    assert load.load_avg_1m == 1.75


def test_without_proc_there_is_no_figure(tmp_path: Path) -> None:
    probe = LoadProbe(tmp_path / "missing")
    assert probe.sample() is None and probe.between(None, None) is None and probe.load_avg() is None


@pytest.mark.realtime
def test_a_busy_process_beside_the_run_is_measured_and_the_report_flags_its_turns(tmp_path: Path) -> None:
    # a busy loop that is not our descendant: its shell exits, so init adopts it
    started = subprocess.run(["sh", "-c", "yes > /dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True)
    busy = int(started.stdout.strip())
    try:
        time.sleep(0.2)
        fixtures = make_fixtures(tmp_path / "fx", ["q1"])
        out = tmp_path / "o"
        args = [str(fixtures), "--config", str(ROOT / "configs" / "simulator.toml"), "--rounds", "2", "--fast"]
        assert main([*args, "--out", str(out), "--quiet"], env={}) == 0
    finally:
        os.kill(busy, signal.SIGKILL)
    data = load_paths([out], ())
    shares = [r.other_cpu_share for r in data.rows]
    assert all(isinstance(s, float) and s > 0.5 for s in shares), shares  # `yes` keeps most of a core busy
    doc = build(data, draw=False)
    text = " ".join(getattr(b, "text", "") for b in doc.blocks)
    assert "ran while other processes kept at least 0.1 of a core busy" in text and "quiet machine" in text
