"""labtools/heard.py's comparison of a recording's silences with the traces', on synthetic rows: each acoustic
row matched and set against the trace column the report's check would choose (``acoustic_match``), the
differences grouped by that column; and the traces read as the report reads them."""

from __future__ import annotations

import csv

from labtools.heard import acoustic_minus_trace, trace_turns
from pipeline.records.acoustic import AcousticRow, failed_row
from tests.paths import TEST_DATA
from tests.report.test_acoustic_match import trace as turn

EXPERIMENT = TEST_DATA / "report" / "experiment"


def row(question: str, silence: float, end_from: str) -> AcousticRow:
    return AcousticRow(
        "", "room", question, 1, None, None, None, silence, None, "acoustic", True, "", speech_end_from=end_from
    )


def test_each_row_is_set_against_the_trace_column_from_its_own_end_of_speech() -> None:
    """The recording minus the traces: a truth row against the silence from the true end (950 ms), a VAD row
    against the silence from the VAD's end (1000 ms), never the one against the other's."""
    turns = [turn("q1"), turn("q2"), turn("q3")]
    rows = [row("q1", 953.0, "truth"), row("q2", 997.5, "vad"), row("q3", 948.0, "truth")]
    assert acoustic_minus_trace(turns, rows) == {
        "true_end_first_audible_ms": [3.0, -2.0],
        "first_audible_ms": [-2.5],
    }


def test_rows_the_report_would_not_compare_are_left_out() -> None:
    """A turn without a true end (no truth in its traces), a row of no traced turn, a turn not measured."""
    turns = [turn("q1", true_end=None), turn("q2"), turn("q3")]
    rows = [
        row("q1", 953.0, "truth"),
        row("q9", 953.0, "truth"),
        failed_row("room", "room.wav: no answer", "q3", 1, speech_end_from="truth"),
        row("q2", 951.0, "truth"),
    ]
    assert acoustic_minus_trace(turns, rows) == {"true_end_first_audible_ms": [1.0]}
    assert acoustic_minus_trace(turns, rows[:3]) == {}


def test_the_traces_are_read_as_the_report_reads_them() -> None:
    with (EXPERIMENT / "bench.csv").open(newline="", encoding="utf-8") as f:
        expected = sorted((r["run_id"], r["question_id"], int(r["round"])) for r in csv.DictReader(f))
    assert sorted((t.run_id, str(t.question_id), t.round) for t in trace_turns(EXPERIMENT)) == expected
