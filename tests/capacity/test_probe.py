"""The server probe: CPU seconds and RSS read from /proc (a fake one here, exact), nothing without a PID."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.capacity.probe import (
    ProbeError,
    ServerProbe,
    check_pid,
    cpu_seconds,
    rss_mb,
    rss_sum_mb,
    tree_cpu_seconds,
)
from pipeline.clock import RealClock, run_on_clock
from pipeline.endpoints.machine_load import tree_pids


def fake_proc(
    tmp_path: Path, utime: int, stime: int, rss_kb: int, pid: int = 42, ppid: int = 1, reaped: int = 0
) -> Path:
    folder = tmp_path / str(pid)
    folder.mkdir(parents=True, exist_ok=True)
    # stat(5): pid (comm) state ppid, then fields 5.. ; utime, stime, cutime, cstime are fields 14 to 17; a comm
    # may hold ") "
    rest = ["S", str(ppid), *["0"] * 9, str(utime), str(stime), str(reaped), "0", *["0"] * 18]
    (folder / "stat").write_text(f"{pid} (python -m x) y) {' '.join(rest)}\n")
    (folder / "status").write_text(f"Name:\tpython\nVmPeak:\t 9999 kB\nVmRSS:\t {rss_kb} kB\n")
    return tmp_path


def test_a_servers_children_count_with_it(tmp_path: Path) -> None:
    """serve --processes N is probed by its parent's PID: its processes' CPU and memory are the server's, and the
    CPU of the children they reaped."""
    fake_proc(tmp_path, utime=10, stime=0, rss_kb=10240, pid=42, reaped=7)
    fake_proc(tmp_path, utime=100, stime=20, rss_kb=102400, pid=43, ppid=42)
    fake_proc(tmp_path, utime=200, stime=30, rss_kb=204800, pid=44, ppid=42)
    fake_proc(tmp_path, utime=5, stime=5, rss_kb=1024, pid=45, ppid=43)
    fake_proc(tmp_path, utime=999, stime=0, rss_kb=999, pid=46)  # another parent's: not the server's
    (tmp_path / "47").mkdir()  # a process that ended while /proc was read
    hz = os.sysconf("SC_CLK_TCK")
    members = tree_pids(tmp_path, 42)
    assert sorted(members) == [42, 43, 44, 45] and members[0] == 42
    assert tree_cpu_seconds(42, tmp_path) == (17 + 120 + 230 + 10) / hz
    assert rss_sum_mb(members, tmp_path) == 10 + 100 + 200 + 1
    (tmp_path / "44" / "stat").unlink()  # a child ending while it is read is left out, the rest still count
    (tmp_path / "44" / "status").unlink()
    assert tree_cpu_seconds(42, tmp_path) == (17 + 120 + 10) / hz
    assert rss_sum_mb(members, tmp_path) == 10 + 100 + 1
    (tmp_path / "43" / "stat").unlink()
    with pytest.raises(ProbeError, match="--server-pid 43: the process is gone"):
        tree_cpu_seconds(43, tmp_path)


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
