"""A fault case's result as a line of the matrix and as JSON: a case not run says why and shows no figures; a
result read back from JSON is the one written."""

from __future__ import annotations

import json

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
