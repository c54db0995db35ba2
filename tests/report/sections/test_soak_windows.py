"""The soak's part of the capacity section: its verdict, its windows and drift checks as written, an unreadable
soak.json said, and nothing where the ramp was no soak."""

from __future__ import annotations

from pathlib import Path

from pipeline.capacity import soak_drift
from pipeline.records import soak_result
from pipeline.records.ramp_result import MachineSpeed, Quantiles
from pipeline.records.soak_result import Soak, SoakWindow
from pipeline.report.document import NOTE, WARNING, Figure, Paragraph, Table
from pipeline.report.sections import soak_windows

NO_FAILURES = {"no_answer": 0, "cut_connection": 1, "refused": 0, "other": 0}


def window(i: int, p50: float, rss: float) -> SoakWindow:
    q = Quantiles(p50, p50 + 100, None, (p50 - 20, p50 + 20), (p50 + 60, p50 + 140))
    speed = MachineSpeed(1.25, 2.5, 3.0, None)
    return SoakWindow(
        i, 60.0 * (i - 1), 60.0 * i, 12, NO_FAILURES, q, 0.4, 55.0, rss, rss + 1, 40, 6, 0.5 * i, None, speed
    )


def written(tmp_path: Path, rising: bool) -> Path:
    windows = [window(i, 1000 + (200 * i if rising else 0), 300 + (20 * i if rising else 0)) for i in range(1, 5)]
    checks = soak_drift.checks(windows)
    soak = Soak(8, 240.0, 60.0, "s-8d", "steps/8", windows, checks, any(c.flagged for c in checks))
    soak_result.write(tmp_path, soak)
    return tmp_path / "capacity.json"


def test_a_soak_that_drifted_is_a_warning_with_its_windows_and_checks(tmp_path: Path) -> None:
    found = soak_windows.blocks(written(tmp_path, rising=True), "capacity", draw=True)
    verdict, windows, checks, figure = found
    assert isinstance(verdict, Paragraph) and verdict.tone == WARNING
    assert (
        "8 device(s) held 4 min in windows of 60 s (4 written): drifted (silence_p50_ms, silence_p90_ms, rss_mb)"
        in (verdict.text)
    )
    assert isinstance(windows, Table) and windows.key == "capacity-soak" and len(windows.rows) == 4
    assert windows.rows[0] == (
        "1", "0-60", "12", "1200 [1180, 1220]", "1300 [1260, 1340]", "1", "55 %", "320-321", "40, 6",
        "0.5, not measured", "1.2 / 2.5 / 3.0 / not measured",
    )  # fmt: skip
    assert isinstance(checks, Table) and [r[0] for r in checks.rows] == soak_drift_figures()
    assert [r[5] for r in checks.rows] == ["yes", "yes", "yes", "no", "no"]
    assert isinstance(figure, Figure) and figure.png.startswith(b"\x89PNG")


def soak_drift_figures() -> list[str]:
    return [figure for figure, *_ in soak_drift.CHECKS]


def test_a_level_soak_is_a_note(tmp_path: Path) -> None:
    verdict, *_ = soak_windows.blocks(written(tmp_path, rising=False), "capacity", draw=False)
    assert isinstance(verdict, Paragraph) and verdict.tone == NOTE and "no figure drifted" in verdict.text


def test_no_soak_json_no_blocks_and_a_bad_one_is_said(tmp_path: Path) -> None:
    assert soak_windows.blocks(tmp_path / "capacity.json", "capacity", draw=False) == []
    (tmp_path / "soak.json").write_text("{not json")
    (said,) = soak_windows.blocks(tmp_path / "capacity.json", "capacity", draw=False)
    assert isinstance(said, Paragraph) and said.tone == WARNING and "not a soak result" in said.text
