"""``python -m pipeline.report`` end to end: the files it writes and its exit status."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.report.__main__ import main
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
DATA = ROOT / "tests" / "data" / "report"
EXPERIMENT = DATA / "experiment"


def test_an_experiment_folder_gives_markdown_html_plots_and_the_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "exp"
    shutil.copytree(EXPERIMENT, exp)
    assert main([str(exp)]) == 0
    out = capsys.readouterr().out
    report = exp / "report"  # the default: the folder's report/ subfolder
    assert out.splitlines() == [
        "27 turn(s), 3 run(s): INCOMPLETE",
        f"report: {report / 'report.md'}",
        f"html:   {report / 'report.html'}",
        f"rows:   {report / 'rows.csv'}",
    ]
    # the rows it was computed from, recomputed from the traces: the same as the replay wrote
    assert (report / "rows.csv").read_text(encoding="utf-8") == (EXPERIMENT / "bench.csv").read_text(encoding="utf-8")
    md = (report / "report.md").read_text(encoding="utf-8")
    assert (
        "| first-token median (ms) | 531.8 [482.9, 588.7] · 6/6 | 302.0 [293.8, 311.5] · 6/6 | "
        "300.3 [287.9, 312.5] · ⚠ 5/6 | measured |" in md
    )
    plots = sorted(p.name for p in (report / "plots").iterdir())
    assert plots == [
        *("cdf.png", "critical-path.png", "order.png", "sentences.png"),
        *("waterfall-A.png", "waterfall-B.png", "waterfall-Bp.png"),
    ]
    for name in plots:
        assert f"](plots/{name})" in md
        assert (report / "plots" / name).read_bytes().startswith(b"\x89PNG")
    page = (report / "report.html").read_text(encoding="utf-8")
    assert page.count('src="data:image/png;base64,') == len(plots)
    assert "http://" not in page and "https://" not in page  # self-contained
    assert '<table id="result">' in page


def test_running_twice_replaces_the_files_instead_of_appending(tmp_path: Path) -> None:
    for _ in range(2):
        assert main([str(EXPERIMENT), "--out", str(tmp_path), "--no-plots"]) == 0
    assert (tmp_path / "rows.csv").read_text(encoding="utf-8").count("\n") == 28
    assert not (tmp_path / "plots").exists()
    assert "Plots were not drawn (--no-plots)." in (tmp_path / "report.md").read_text(encoding="utf-8")


def test_trace_files_as_paths_and_a_refused_comparison_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [str(EXPERIMENT / "traces" / "a1.jsonl"), str(DATA / "failed" / "traces" / "f1.jsonl")]
    assert main([*files, "--out", str(tmp_path), "--no-plots"]) == 3  # f1 has another turn time limit
    assert "COMPARISON REFUSED (M11)" in (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "run.turn_timeout_s" in (tmp_path / "report.md").read_text(encoding="utf-8")
    capsys.readouterr()


def test_paths_and_jaeger_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main([])
    assert stop.value.code == 2
    assert "give trace paths or --jaeger URL" in capsys.readouterr().err


def test_the_module_runs_as_a_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.report", str(DATA / "drift"), "--out", str(tmp_path), "--no-plots"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "⚠ DRIFTING UPWARD" in (tmp_path / "report.md").read_text(encoding="utf-8")
