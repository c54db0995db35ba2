"""Section 1c, what the recording says, and the first table's acoustic check, on small synthetic rows:
trace turns with known silences, acoustic rows written as ``pipeline.acoustic measure`` writes them,
and a recording with a known first audible sample."""

from __future__ import annotations

import csv
import wave
from pathlib import Path

import numpy as np
import pytest

from pipeline.records.acoustic import AcousticError, AcousticRow, read_rows
from pipeline.records.acoustic import write_rows as write_acoustic_rows
from pipeline.records.turn_row import TurnRow
from pipeline.report import acoustic_match
from pipeline.report.__main__ import main
from pipeline.report.build import build
from pipeline.report.document import Document, Figure
from pipeline.report.load import Dataset
from pipeline.report.sections import recording_check
from tests.paths import TEST_DATA

EXPERIMENT = TEST_DATA / "report" / "experiment"
FIELDS = (
    "run_id",
    "device",
    "question_id",
    "round",
    "speech_end_s",
    "first_audible_s",
    "last_audible_s",
    "first_audible_ms",
    "whole_turn_ms",
    "measured_by",
    "ok",
    "error",
)
RATE = 16_000


def trace(question: str, silence: float, true_end: float | None = None) -> TurnRow:
    """A device's turn: ``silence`` from its VAD's end of speech, ``true_end`` from its question's truth."""
    n = int(question[1:])
    return TurnRow(
        run_id="r1",
        condition="B",
        question_id=question,
        round=2,
        ok=1,
        transport="websocket",
        first_audible_ms=silence,
        true_end_first_audible_ms=true_end,
        device=0,
        turn_start_ns=n,
    )


TRACES = [trace("q1", 1000.0), trace("q2", 1500.0), trace("q3", 2000.0)]


def write_rows(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({**dict.fromkeys(FIELDS, ""), "measured_by": "acoustic", "ok": "true", **row})
    return path


def rows_csv(tmp_path: Path) -> Path:
    return write_rows(
        tmp_path / "rows.csv",
        [
            {"device": "device-0", "question_id": "q1", "round": "2", "first_audible_ms": "998.0"},
            {
                "device": "device-0",
                "question_id": "q2",
                "round": "2",
                "speech_end_s": "1.0",
                "first_audible_s": "2.49",
                "first_audible_ms": "1490.0",
            },
            {"device": "device-0", "question_id": "q3", "round": "2", "ok": "false", "error": "d.wav: no answer"},
            {"device": "device-0", "question_id": "q9", "round": "2", "first_audible_ms": "700.0"},
            {"device": "1", "question_id": "", "round": "", "ok": "false", "error": "1.wav: no speech found"},
        ],
    )


def write_wav(path: Path) -> Path:
    """3 s stereo: the microphone speaks until 1.0 s, the speaker answers from 2.49 s."""
    pcm = np.zeros((3 * RATE, 2), dtype="<i2")
    pcm[:RATE, 0] = 3000
    pcm[int(2.49 * RATE) :, 1] = 3000
    with wave.open(str(path), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.tobytes())
    return path


@pytest.fixture
def doc(tmp_path: Path) -> Document:
    write_wav(tmp_path / "device-0.wav")
    given = acoustic_match.load([rows_csv(tmp_path)], recordings=tmp_path)
    return build(Dataset.of_rows(TRACES, "test"), draw=True, acoustic=given)


def test_per_run_median_worst_and_the_turns_beyond_the_tolerance(doc: Document, tmp_path: Path) -> None:
    assert doc.table("recording-runs").rows == (
        (
            "r1",
            "2/3",
            "first_audible_ms",
            "1250.0",
            "1244.0",
            "+6.0",
            "+10.0 (q2 round 2)",
            "1/2",
            recording_check.ATTRIBUTION,
        ),
    )
    assert doc.table("recording-runs").headers[7] == "beyond ±5 ms"
    assert doc.table("recording-turns").rows == (
        ("r1 device 0, q1 round 2", "first_audible_ms", "1000.0", "998.0", "+2.0", "yes"),
        ("r1 device 0, q2 round 2", "first_audible_ms", "1500.0", "1490.0", "+10.0", "no: beyond ±5 ms"),
    )
    assert doc.table("recording-disagree").rows == (
        ("r1 device 0, q2 round 2", "first_audible_ms", "1500.0", "1490.0", "+10.0", f"{tmp_path / 'rows.csv'}:3"),
    )
    text = doc.text()
    assert (  # rows written without speech_end_from took their end from the VAD: the run's --config matters
        "1 turn(s) disagree by more than ±5 ms, 1 of them from the VAD's end of speech. Were the recordings measured "
        "with the run's own configuration (`--config`)?" in text
    )
    assert (
        "The recording disagrees with the traces on 1 turn(s) by more than ±5 ms: see 1c. What the recording says."
        in text
    )
    assert "Tolerance: ±5 ms (5 ms on the emulator's own recording, 20 ms in a room" in text
    assert f"{tmp_path / 'rows.csv'}:4: r1 device 0, q3 round 2: d.wav: no answer" in text
    assert f"{tmp_path / 'rows.csv'}:6: 1.wav: no speech found" in text  # a whole file: no question, no round
    assert f"{tmp_path / 'rows.csv'}:5: q9 round 2 (device-0): no trace turn of that device, question and round" in text


def test_the_first_table_shows_the_recordings_silence_beside_the_traces(doc: Document) -> None:
    rows = {r[0]: r[2] for r in doc.table("result").rows}
    assert rows["silence median (ms)"].startswith("1500.0 [")
    assert rows["silence median, from the recording (ms)"].startswith("1244.0 [")
    assert rows["silence median, from the recording (ms)"].endswith("· ⚠ 2/3")
    assert rows["silence: trace - recording, median / worst (ms)"] == "+6.0 / +10.0 · ⚠ 2/3"


def test_the_waveform_of_the_turn_that_disagrees_most_is_drawn(doc: Document) -> None:
    (fig,) = [f for f in doc.figures() if f.key == "recording-waveform"]
    assert isinstance(fig, Figure) and fig.png.startswith(b"\x89PNG")
    assert fig.caption.startswith("r1 device 0, q2 round 2 (")
    assert "differ most (+10.0 ms)" in fig.caption


def test_a_wider_tolerance_agrees(tmp_path: Path) -> None:
    given = acoustic_match.load([rows_csv(tmp_path)], tolerance_ms=20.0)
    doc = build(Dataset.of_rows(TRACES, "test"), draw=False, acoustic=given)
    assert doc.table("recording-runs").rows[0][7] == "0/2"
    assert "recording-disagree" not in doc.table_keys()
    assert "Every compared turn agrees within ±20 ms." in doc.text()
    assert "The recording disagrees" not in doc.text()


def test_without_acoustic_rows_the_section_says_how_to_get_them() -> None:
    doc = build(Dataset.of_rows(TRACES, "test"), draw=False)
    assert recording_check.HEADING in doc.text()
    assert "--acoustic ROWS.csv" in doc.text() and acoustic_match.MEASURE_COMMAND in doc.text()
    assert [r[0] for r in doc.table("result").rows][:3] == [
        "silence median (ms)",
        "silence P90 (ms)",
        "first-token median (ms)",
    ]


def test_a_row_without_a_run_is_matched_where_one_run_has_the_turn_and_not_where_two_do() -> None:
    row = AcousticRow("", "device3", "q1", 2, None, None, None, 10.0, None, "acoustic", True, "", where="f:2")
    one = [TurnRow(run_id="r1", question_id="q1", round=2, device=3)]
    two = [*one, TurnRow(run_id="r2", question_id="q1", round=2, device=3)]
    assert [m.row for m in acoustic_match.match(one, [row])[0]] == [row]
    assert acoustic_match.match(two, [row]) == (
        [],
        [(row, "several runs have that turn (r1, r2) and the row names none")],
    )
    assert acoustic_match.match([trace("q1", 12.0)], [row])[1] == [
        (row, "no trace turn of that device, question and round")
    ]


def test_bad_acoustic_rows_are_refused_naming_the_file_and_line(tmp_path: Path) -> None:
    bad = write_rows(
        tmp_path / "bad.csv", [{"device": "d", "question_id": "q1", "round": "two", "first_audible_ms": "1"}]
    )
    with pytest.raises(AcousticError, match=r"bad\.csv:2: round 'two' is not a whole number"):
        read_rows(bad)
    nan = write_rows(
        tmp_path / "nan.csv", [{"device": "d", "question_id": "q1", "round": "1", "first_audible_ms": "nan"}]
    )
    with pytest.raises(AcousticError, match=r"nan\.csv:2: first_audible_ms 'nan' is not a finite number"):
        read_rows(nan)
    (tmp_path / "other.csv").write_text("run_id,first_audible_ms\n", encoding="utf-8")
    with pytest.raises(AcousticError, match=r"other\.csv: not acoustic rows: no column device"):
        read_rows(tmp_path / "other.csv")
    trace_rows = write_rows(tmp_path / "trace.csv", [{"question_id": "q1", "round": "1", "measured_by": "trace"}])
    with pytest.raises(AcousticError, match="measured_by is 'trace', not 'acoustic'"):
        read_rows(trace_rows)


def test_the_command_takes_acoustic_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = write_rows(
        tmp_path / "rows.csv",
        [{"run_id": "b1", "device": "desk", "question_id": "en01", "round": "2", "first_audible_ms": "1.0"}],
    )
    out = tmp_path / "out"
    assert main([str(EXPERIMENT), "--out", str(out), "--no-plots", "--acoustic", str(rows)]) == 0
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## 1c. What the recording says" in report and "| b1 | 1/1 |" in report
    assert main([str(EXPERIMENT), "--out", str(out), "--acoustic", str(tmp_path / "missing.csv")]) == 2
    assert f"error: {tmp_path / 'missing.csv'}: cannot read acoustic rows" in capsys.readouterr().err


def test_past_its_most_only_the_turns_beyond_the_tolerance_are_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recording_check, "MOST_TURNS", 1)
    doc = build(Dataset.of_rows(TRACES, "test"), draw=False, acoustic=acoustic_match.load([rows_csv(tmp_path)]))
    assert "recording-turns" not in doc.table_keys() and len(doc.table("recording-disagree").rows) == 1
    assert "2 turns compared: past 1, only those beyond the tolerance are listed." in doc.text()


def test_a_difference_that_rounds_to_nothing_reads_plus_zero(tmp_path: Path) -> None:
    rows = write_rows(
        tmp_path / "r.csv", [{"device": "0", "question_id": "q1", "round": "2", "first_audible_ms": "1000.04"}]
    )
    doc = build(Dataset.of_rows(TRACES, "test"), draw=False, acoustic=acoustic_match.load([rows]))
    assert doc.table("recording-turns").rows == (
        ("r1 device 0, q1 round 2", "first_audible_ms", "1000.0", "1000.0", "+0.0", "yes"),
    )
    assert {r[0]: r[2] for r in doc.table("result").rows}["silence: trace - recording, median / worst (ms)"] == (
        "+0.0 / +0.0 · ⚠ 1/3"
    )


def test_each_table_names_the_trace_column_each_turn_was_compared_with(tmp_path: Path) -> None:
    """A row from its question's truth is set against the silence from the true end, one from the VAD against
    the silence from the VAD's end; a run with both names both, and a turn without a true end is not compared."""
    traces = [trace("q1", 1000.0, 950.0), trace("q2", 1500.0, 1420.0), trace("q3", 2000.0, None)]
    rows = write_truth_rows(tmp_path, [("q1", "940.0", "truth"), ("q2", "1490.0", "vad"), ("q3", "1900.0", "truth")])
    doc = build(Dataset.of_rows(traces, "test"), draw=False, acoustic=acoustic_match.load([rows]))
    (run,) = doc.table("recording-runs").rows
    assert run[:3] == ("r1", "2/3", "first_audible_ms, true_end_first_audible_ms")
    assert doc.table("recording-runs").headers[2] == "trace column"
    assert doc.table("recording-turns").rows == (
        ("r1 device 0, q1 round 2", "true_end_first_audible_ms", "950.0", "940.0", "+10.0", "no: beyond ±5 ms"),
        ("r1 device 0, q2 round 2", "first_audible_ms", "1500.0", "1490.0", "+10.0", "no: beyond ±5 ms"),
    )
    assert [r[:2] for r in doc.table("recording-disagree").rows] == [
        ("r1 device 0, q1 round 2", "true_end_first_audible_ms"),
        ("r1 device 0, q2 round 2", "first_audible_ms"),
    ]
    assert "`true_end_first_audible_ms` where the acoustic row's end of speech is its question's truth" in (
        doc.table("recording-turns").caption
    )
    assert (
        "2 turn(s) disagree by more than ±5 ms, 1 of them from the VAD's end of speech. Were the recordings measured "
        "with the run's own configuration (`--config`)? Its VAD decides where the speech of a question without a "
        "truth ends:" in doc.text()
    )


def test_turns_from_their_truth_alone_do_not_ask_after_the_runs_vad(tmp_path: Path) -> None:
    traces = [trace("q1", 1000.0, 950.0), trace("q2", 1500.0, 1420.0)]
    rows = write_truth_rows(tmp_path, [("q1", "940.0", "truth"), ("q2", "1419.0", "truth")])
    doc = build(Dataset.of_rows(traces, "test"), draw=False, acoustic=acoustic_match.load([rows]))
    assert doc.table("recording-disagree").rows == (
        ("r1 device 0, q1 round 2", "true_end_first_audible_ms", "950.0", "940.0", "+10.0", f"{rows}:2"),
    )
    text = doc.text()
    assert (
        "1 turn(s) disagree by more than ±5 ms, each compared from its question's true end of speech "
        "(`true_end_first_audible_ms`), no VAD's:" in text
    )
    assert "--config" not in text and "Its VAD decides" not in text


def acoustic_row(question: str, silence: float, end_from: str) -> AcousticRow:
    """A measured turn of device 0, round 2, its end of speech from ``end_from`` (truth or vad)."""
    return AcousticRow(
        "", "device-0", question, 2, None, None, None, silence, None, "acoustic", True, "", speech_end_from=end_from
    )


def write_truth_rows(tmp_path: Path, rows: list[tuple[str, str, str]]) -> Path:
    """Acoustic rows as ``pipeline.acoustic measure`` writes them: (question, silence, truth or vad) each."""
    path = tmp_path / "truth-rows.csv"
    write_acoustic_rows(path, [acoustic_row(q, float(ms), end_from) for q, ms, end_from in rows])
    return path
