"""The fault ledger on hand-made rows: every planned turn in exactly one row, what is lost, doubled or foreign,
the time until each device hit was answered again, and bench.csv against the traces' rows."""

from __future__ import annotations

from msgspec.structs import replace

from pipeline.interop.fault_ledger import error_kind, ledger, planned, recovery_s, traces_agree
from pipeline.records.turn_row import TurnRow

S = 1_000_000_000  # ns in a second
FAULT = 100 * S


def row(question: str, start_s: float, ok: bool = True, error: str = "", device: int | None = None) -> TurnRow:
    return TurnRow(
        run_id="r",
        question_id=question,
        round=1,
        ok=int(ok),
        error=error,
        turn_start_ns=int(start_s * S),
        device=device,
        whole_turn_ms=4000.0 if ok else None,
    )


def test_planned_turns_name_the_device_only_in_a_many_device_run() -> None:
    assert planned(["a", "b"], 1, 1) == [(None, 1, "a"), (None, 1, "b")]
    assert planned(["a"], 2, 2) == [(0, 1, "a"), (0, 2, "a"), (1, 1, "a"), (1, 2, "a")]


def test_every_planned_turn_in_one_row_is_whole() -> None:
    rows = [row("a", 90), row("b", 101, ok=False, error="disconnected"), row("c", 112)]
    got = ledger(planned(["a", "b", "c"], 1, 1), rows, FAULT)
    assert got.whole
    assert (got.planned, got.rows, got.ok) == (3, 3, 2)
    assert got.failed == {"disconnected": 1}
    assert got.recovery_s == 12.0
    assert (got.ok_after_fault, got.failed_after_fault) == (1, 1)
    assert got.slowest_ok_s == 4.0


def test_a_turn_with_no_row_is_lost_and_one_with_two_is_doubled() -> None:
    rows = [row("a", 90), row("a", 95), row("x", 96)]
    got = ledger(planned(["a", "b"], 1, 1), rows, FAULT)
    assert not got.whole
    assert got.lost == [(None, 1, "b")]
    assert got.duplicates == [(None, 1, "a")]
    assert got.unplanned == [(None, 1, "x")]


def test_recovery_waits_for_every_device_the_fault_hit() -> None:
    rows = [
        row("a", 101, device=0),  # not hit: answered at once
        row("a", 99, ok=False, error="disconnected", device=1),
        row("b", 107.5, device=1),
    ]
    assert recovery_s(rows, FAULT) == 7.5
    assert recovery_s(rows[:2], FAULT) is None  # device 1 never answered again
    assert recovery_s(rows, None) is None


def test_where_no_turn_failed_every_device_counts() -> None:
    assert recovery_s([row("a", 103, device=0), row("a", 104, device=1)], FAULT) == 4.0


def test_an_error_is_shown_by_its_first_line_cut_short() -> None:
    assert error_kind(row("a", 1, ok=False, error="timeout\nmore")) == "timeout"
    assert error_kind(row("a", 1, ok=False)) == "no error text"
    assert len(error_kind(row("a", 1, ok=False, error="x" * 200))) == 80


def test_a_failed_row_names_its_servers_cause_beside_what_the_device_saw() -> None:
    saw = row("a", 1, ok=False, error="no_audio_out")
    assert error_kind(replace(saw, server_error="LlmHttpError\n503")) == "no_audio_out (server: LlmHttpError)"
    assert error_kind(replace(saw, server_error="no_audio_out")) == "no_audio_out"  # said once
    got = ledger(planned(["a", "b"], 1, 1), [replace(saw, server_error="timeout"), replace(saw, question_id="b")], None)
    assert got.failed == {"no_audio_out (server: timeout)": 1, "no_audio_out": 1}


def test_the_traces_agree_with_bench_csv_only_cell_for_cell() -> None:
    rows = [row("a", 90), row("b", 101)]
    assert traces_agree(rows, list(reversed(rows))) == ""
    assert traces_agree(rows, rows[:1]) == "1 row(s) only in bench.csv, 0 only in the traces"
    changed = [rows[0], replace(rows[1], whole_turn_ms=1.0)]
    assert traces_agree(rows, changed) == "the same turns, 1 row(s) with other cells (first: b)"
