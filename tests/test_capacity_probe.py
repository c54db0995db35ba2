"""The server probe: CPU seconds and RSS read from /proc (a fake one here, exact), nothing without a PID."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.capacity.probe import ProbeError, ServerProbe, check_pid, cpu_seconds, rss_mb
from pipeline.clock import RealClock, run_on_clock


def fake_proc(tmp_path: Path, utime: int, stime: int, rss_kb: int) -> Path:
    folder = tmp_path / "42"
    folder.mkdir(parents=True, exist_ok=True)
    # stat(5): pid (comm) state, then fields 4.. ; utime and stime are fields 14 and 15; a comm may hold ") "
    rest = ["S", *["0"] * 10, str(utime), str(stime), *["0"] * 20]
    (folder / "stat").write_text(f"42 (python -m x) y) {' '.join(rest)}\n")
    (folder / "status").write_text(f"Name:\tpython\nVmPeak:\t 9999 kB\nVmRSS:\t {rss_kb} kB\n")
    return tmp_path


def test_cpu_and_rss_from_proc(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, utime=250, stime=50, rss_kb=204800)
    assert cpu_seconds(42, proc) == 300 / os.sysconf("SC_CLK_TCK")
    assert rss_mb(42, proc) == 200.0
    (proc / "42" / "status").write_text("Name:\tzombie\n")
    with pytest.raises(ProbeError, match="no VmRSS"):
        rss_mb(42, proc)


def test_no_pid_no_figures_and_a_bad_pid_refused() -> None:
    probe = ServerProbe(None)

    async def hold() -> None:
        probe.start()
        await probe.stop()

    run_on_clock(hold(), RealClock())
    assert (probe.cpu_pct, probe.rss_max_mb) == (None, None)
    check_pid(None)
    check_pid(os.getpid())
    with pytest.raises(ProbeError, match="--server-pid 999999999: no process"):
        check_pid(999999999)
