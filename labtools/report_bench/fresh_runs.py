"""The report command and ``pipeline.analyze`` measured in fresh interpreters, with this checkout's code or a
baseline's (nothing warm but the page cache, nothing shared), and the child run that does the measuring."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labtools.report_bench.machine import load_text, ready, rss_mib, speed_check

# run again with --child: the measured run
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_report.py"
STEPS = ("read", "build", "write")  # what a child run times, in order


def child(traces: Path, out: Path) -> None:
    """One measurement, in the fresh interpreter a parent started: the report command a user runs
    (``python -m pipeline.report TRACES --out OUT``), its steps timed; the times as one JSON line."""
    from pipeline.report import __main__ as command

    seconds: dict[str, float] = {}

    def timing(step: str, run: Callable[..., Any]) -> Callable[..., Any]:
        def timed_run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return run(*args, **kwargs)
            finally:
                seconds[step] = time.perf_counter() - t0

        return timed_run

    for step, name in zip(STEPS, ("load", "build", "write"), strict=True):  # the command's own steps
        setattr(command, name, timing(step, getattr(command, name)))
    loaded = command.load

    def load(*args: Any, **kwargs: Any) -> Any:
        data = loaded(*args, **kwargs)
        readers.append(getattr(data, "workers", 1))  # a checkout before the parallel reading has no such field
        return data

    readers: list[int] = []
    command.load = load
    with contextlib.redirect_stdout(sys.stderr):  # its summary lines: stdout is for the JSON line
        if hasattr(command, "exit_now"):  # as ``python -m pipeline.report`` runs it, its dataset held to the end
            status, _held = command.report([str(traces), "--out", str(out)])
        else:  # a checkout before its fast exit
            status = command.main([str(traces), "--out", str(out)])
    mine = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # forked readers and plot drawing
    cpu = mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime
    result = {
        "seconds": seconds,
        "status": status,
        "cpu": cpu,
        "rss_mib": rss_mib(),
        "child_rss_mib": children.ru_maxrss / 1024,  # the largest child's
        "readers": readers[0],
    }
    print(json.dumps(result))
    if hasattr(command, "exit_now"):
        command.exit_now(0)  # this run's own status is in the JSON line


def measure(code: Path, traces: Path, out: Path) -> dict[str, Any]:
    """``code``'s report of ``traces``, in a fresh interpreter (nothing warm but the page cache, nothing shared)."""
    warmed, speed = ready(traces)
    # that checkout's code first on the child's path (before the installed project): the report it imports
    # is that checkout's; so is this package, where that checkout has one (one from before labtools has not)
    env = {**os.environ, "PYTHONPATH": str(code)}
    cmd = [sys.executable, str(SCRIPT), "--child", str(traces), str(out)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process"] = time.perf_counter() - t0
    result["rows"] = csv_rows(rows_file(out))
    result["load"] = load_text()
    result["warmed"] = warmed
    result["speed"] = (speed, speed_check(traces))
    return result


def rows_file(out: Path) -> Path:
    """The rows a report wrote: rows.csv (bench.csv in a checkout from before that name)."""
    return out / "rows.csv" if (out / "rows.csv").is_file() else out / "bench.csv"


def csv_rows(path: Path) -> int:
    """Rows in a CSV file, its header left out (0 where there is no file)."""
    if not path.is_file():
        return 0
    with path.open(encoding="utf-8") as fh:
        return sum(1 for _ in fh) - 1  # the header


def same_bytes(a: Path, b: Path) -> str:
    """Whether two files hold the same bytes, in words."""
    if not (a.is_file() and b.is_file()):
        return "not both written"
    return "the same" if a.read_bytes() == b.read_bytes() else "DIFFERENT"


def analyze(code: Path, traces: Path, out: Path) -> dict[str, Any]:
    """``python -m pipeline.analyze TRACES --csv OUT`` with ``code``'s code, in a fresh interpreter: its
    wall time, CPU time and peak resident size (its readers' too: ``wait4`` gives the largest of them)."""
    _, speed = ready(traces)  # as before a report's run
    cmd = [sys.executable, "-m", "pipeline.analyze", str(traces), "--csv", str(out)]
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(code)}  # that checkout's code, whatever the venv was installed from
    child = subprocess.Popen(cmd, cwd=code, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return {
        "seconds": seconds,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss_mib": usage.ru_maxrss / 1024,
        "status": child.returncode,
        "rows": csv_rows(out),
        "speed": (speed, speed_check(traces)),
    }
