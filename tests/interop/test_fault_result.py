"""A fault case's result as a line of the matrix and as JSON: a case not run says why and shows no figures; a
result read back from JSON is the one written."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.interop.fault_compare import side_by_side
from pipeline.interop.fault_ledger import Ledger
from pipeline.interop.fault_result import CaseResult, table_line, write_json


def result() -> CaseResult:
    ledger = Ledger(
        planned=4, rows=4, ok=3, failed={"disconnected": 1}, lost=[], duplicates=[], unplanned=[],
        recovery_s=11.04, slowest_ok_s=5.0,
    )  # fmt: skip
    return CaseResult(
        "kill-restart", "server kill -9", device_saw=["[2/4] en01: FAILED (disconnected) (x1)"], ledger=ledger,
        analyze="same 4 rows", server_records=["server: same 1 rows"],
    )  # fmt: skip


def test_a_case_run_is_one_line_of_the_table() -> None:
    assert table_line(result()) == (
        "| kill-restart: server kill -9 | [2/4] en01: FAILED (disconnected) (x1) "
        "| 3 ok / 1 failed of 4 planned (1 disconnected); slowest ok turn 5.0 s | 11.0 s | 0 | 0 | same 4 rows "
        "| server: same 1 rows | nothing |\n"
    )


def test_a_case_not_run_says_why_and_shows_no_figures() -> None:
    line = table_line(CaseResult("cut-5", "network cut 5 s", status="not run: needs root"))
    assert line == "| cut-5: network cut 5 s | not run: needs root | - | - | - | - | - | - | - |\n"


def test_a_result_read_back_from_json_is_the_one_written() -> None:
    written = result()
    written.ledger = Ledger(
        planned=2, rows=1, ok=1, failed={}, lost=[(None, 1, "b")], duplicates=[(0, 1, "a")], unplanned=[],
        recovery_s=None,
    )  # fmt: skip
    data = json.loads(write_json([written], {"command": "x"}))
    assert data["command"] == "x"
    assert CaseResult.from_dict(data["cases"][0]) == written


def test_two_matrices_side_by_side_a_line_per_case_each_side_its_own(tmp_path: Path) -> None:
    lab, real = tmp_path / "lab.json", tmp_path / "real.json"
    header = {"command": "python scripts/fault_matrix.py", "commit": "abc1234", "started": "2026-12-07 01:00"}
    lab.write_text(write_json([result()], {**header, "server": "the lab's server"}), encoding="utf-8")
    skipped = CaseResult("kill-worker", "one of 2 processes", status="not run: the real server runs one process")
    real.write_text(write_json([skipped, result()], {**header, "server": "the real server"}), encoding="utf-8")
    text = side_by_side([lab, real]).splitlines()
    assert text[0] == (
        "| case | the lab's server: rows: ok / failed (error) | the lab's server: recovered after "
        "| the lab's server: lost, doubled | the real server: rows: ok / failed (error) "
        "| the real server: recovered after | the real server: lost, doubled |"
    )
    ran = "3 ok / 1 failed of 4 planned (1 disconnected); slowest ok turn 5.0 s | 11.0 s | 0, 0"
    assert text[2] == f"| kill-restart: server kill -9 | {ran} | {ran} |"
    assert text[3] == (
        "| kill-worker: one of 2 processes | not in this matrix | - | - "
        "| not run: the real server runs one process | - | - |"
    )
    assert text[5].startswith("- the lab's server: `python scripts/fault_matrix.py` at abc1234, 2026-12-07 01:00")
