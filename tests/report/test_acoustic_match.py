"""Which trace silence an acoustic row is compared with: a row measured from its question's truth against the
traces' silence from the true end (``true_end_first_audible_ms``), any other against the silence from the
VAD's end (``first_audible_ms``; in one process ``first_audio_ms``); each match names the column compared."""

from __future__ import annotations

from pathlib import Path

from pipeline.records.acoustic import AcousticRow, read_rows, write_rows
from pipeline.records.turn_row import TurnRow
from pipeline.report import acoustic_match
from pipeline.report.acoustic_match import Match
from pipeline.report.silence import silence_of


def trace(question: str, true_end: float | None = 950.0) -> TurnRow:
    """A device's turn: 1000 ms of silence from its VAD's end, ``true_end`` from its truth's (None: no truth)."""
    return TurnRow(
        run_id="r1",
        question_id=question,
        round=1,
        ok=1,
        transport="websocket",
        device=0,
        first_audible_ms=1000.0,
        true_end_first_audible_ms=true_end,
    )


def row(question: str, silence: float, end_from: str) -> AcousticRow:
    return AcousticRow(
        "r1", "device-0", question, 1, None, None, None, silence, None, "acoustic", True, "", speech_end_from=end_from
    )


def test_a_row_from_the_truth_is_compared_with_the_silence_from_the_true_end() -> None:
    (m,), unmatched = acoustic_match.match([trace("q1")], [row("q1", 947.5, "truth")])
    assert not unmatched
    assert m.compared == "true_end_first_audible_ms" and m.trace_ms == 950.0 and m.difference_ms == 2.5


def test_a_row_from_the_vad_is_compared_with_the_silence_from_the_vads_end() -> None:
    (m,), _ = acoustic_match.match([trace("q1")], [row("q1", 997.5, "vad")])
    assert m.compared == "first_audible_ms" and m.trace_ms == 1000.0 and m.difference_ms == 2.5


def test_the_same_turn_gives_each_row_the_silence_from_its_own_end() -> None:
    """Both rows are 2.5 ms under their own trace column; against the other column they would be 52.5 ms apart."""
    turns = [trace("q1"), trace("q2")]
    found, _ = acoustic_match.match(turns, [row("q1", 947.5, "truth"), row("q2", 997.5, "vad")])
    assert [(m.compared, m.difference_ms) for m in found] == [
        ("true_end_first_audible_ms", 2.5),
        ("first_audible_ms", 2.5),
    ]


def test_a_row_from_the_truth_is_not_compared_with_a_turn_that_has_no_true_end() -> None:
    """Traces without the truth column (a question without a truth there, or traces older than it) leave the
    turn uncompared rather than set a silence from the truth's end against one from the VAD's."""
    (m,), _ = acoustic_match.match([trace("q1", true_end=None)], [row("q1", 947.5, "truth")])
    assert m.compared == "true_end_first_audible_ms" and m.trace_ms is None and m.difference_ms is None


def test_an_in_process_turn_is_compared_with_its_playbacks_start() -> None:
    in_process = TurnRow(run_id="r1", question_id="q1", round=1, ok=1, first_audio_ms=800.0)
    m = Match(in_process, row("q1", 797.0, "vad"))
    assert m.compared == "first_audio_ms" and m.difference_ms == 3.0


def test_the_rows_read_back_pick_their_columns_and_older_rows_compare_as_the_vads(tmp_path: Path) -> None:
    written = tmp_path / "rows.csv"
    write_rows(written, [row("q1", 947.5, "truth"), row("q2", 997.5, "vad")])
    old = tmp_path / "old.csv"  # written before the column existed: every end was the VAD's
    old.write_text(
        "run_id,device,question_id,round,first_audible_ms,measured_by,ok,error\nr1,device-0,q3,1,996.0,acoustic,true,\n",
        encoding="utf-8",
    )
    given = acoustic_match.load([written, old])
    found, unmatched = acoustic_match.match([trace("q1"), trace("q2"), trace("q3")], given.rows)
    assert not unmatched and given.rows == (*read_rows(written), *read_rows(old))
    assert [(m.row.question_id, m.compared, m.difference_ms) for m in found] == [
        ("q1", "true_end_first_audible_ms", 2.5),
        ("q2", "first_audible_ms", 2.5),
        ("q3", "first_audible_ms", 4.0),
    ]


def test_a_vad_rows_trace_silence_is_the_reports_own() -> None:
    """The column and its value come from ``silence.silence_of``, the rule every section's silence reads."""
    for turn in (trace("q1"), TurnRow(run_id="r1", question_id="q1", round=1, ok=1, first_audio_ms=800.0)):
        m = Match(turn, row("q1", 797.0, "vad"))
        assert m.silence == silence_of(turn) and (m.compared, m.trace_ms) == silence_of(turn)
