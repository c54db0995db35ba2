"""Record files take whole lines or nothing: a write cut short by the file-size limit (a partial write, as a
filling disk gives) is cut back, and the error names the file; a run whose trace folder fills stops with that
error, and its bench.csv and traces hold the same whole turns."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.analysis.read import read_traces
from pipeline.analysis.traces import trace_files
from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.whole_lines import RecordWriteError, append_whole
from tests.paths import REPO_ROOT

# a process with a file-size limit of 100 bytes appends 60-byte lines: the second write stops at the limit
# after 40 bytes (a partial write), the third finds the limit reached (EFBIG)
LIMITED = """
import resource, signal, sys
from pathlib import Path
from pipeline.records.whole_lines import RecordWriteError, append_whole
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY))
path = Path(sys.argv[1])
for i in range(3):
    try:
        append_whole(path, (str(i) * 59 + "\\n").encode())
        print("written", i)
    except RecordWriteError as exc:
        print("refused", i, exc.errno, exc)
"""


def test_a_line_the_file_cannot_take_is_left_out_whole(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    said = subprocess.run(
        [sys.executable, "-c", LIMITED, str(path)], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    ).stdout.splitlines()
    assert said[0] == "written 0"
    assert said[1].startswith(f"refused 1 27 {path}: cannot be written (File too large): the line(s) of 60 bytes")
    assert said[2].startswith("refused 2 27 ")
    assert path.read_bytes() == b"0" * 59 + b"\n"  # the 40 bytes of line 1 that got in were cut back


def test_an_unwritable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(RecordWriteError, match=r"^/dev/full: cannot be written \(No space left on device\)"):
        append_whole(Path("/dev/full"), b"x\n")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: a trace folder that fills after a few turns (mounting needs root, as CI has)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.realtime
def test_a_run_whose_disk_fills_stops_clearly_and_keeps_whole_turns(small_disk: Path) -> None:
    out = small_disk / "run"
    command = [sys.executable, "-m", "pipeline.replay", "audio_fixtures", "--config", "configs/simulator.toml"]
    command += ["--clock", "virtual", "--out", str(out), "--run-id", "full", "--limit", "12"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "cannot be written (No space left on device)" in done.stderr
    rows = read_bench_csv(out / "bench.csv")
    assert f"{len(rows)} turn(s) finished before it are written" in done.stderr and 0 < len(rows) < 24
    read = read_traces(trace_files(out / "traces"), workers=1)
    assert not read.problems  # every line whole: none unreadable
    assert read.rows == sorted(rows, key=lambda r: r.turn_start_ns)  # the traces and bench.csv agree
