"""The end of speech a turn's silence starts from: the question's truth where it carries one (``truth.csv``),
the run's VAD's where it has none, and the rows saying which (``speech_end_from``).

The fixtures folders are built here from two shipped clips: ``en02_paused`` (its user pauses mid-question,
so the energy VAD ends the speech at the pause, seconds before the truth does) and ``en01`` (given no truth).
The recordings are built with every figure known to the sample (``tests.acoustic_synth``).
"""

from __future__ import annotations

import asyncio
import csv
from collections.abc import Sequence
from pathlib import Path

import pytest
import soundfile

from pipeline.acoustic import __main__ as command
from pipeline.acoustic import questions as questions_module
from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.questions import PlayedQuestion, load_questions
from pipeline.events import FRAME_MS
from pipeline.records.acoustic import COLUMNS, AcousticError, read_rows, write_rows
from pipeline.records.truth import read_truth
from pipeline.run.assembly import Engines, build_vad
from pipeline.run.device_side import speech_end_ms
from pipeline.settings.audio import load_audio
from pipeline.settings.fixtures import load_questions as load_fixtures
from tests.acoustic_synth import ENERGY, FIXTURES, build

PAUSED = FIXTURES / "paused"
CLIPS = {"en02_paused": PAUSED, "en01": FIXTURES}  # question id -> the shipped folder it comes from
SIMULATOR = FIXTURES.parent / "configs" / "simulator.toml"  # its VAD is the energy one: no model to load
# question index (0: en02_paused, 1: en01), silence after its end of speech (s), answer length (s)
PLAN = [(0, 0.8, 1.0), (1, 1.1, 0.9), (0, 0.5, 1.2)]
RATE = 16000


def fixtures_folder(folder: Path, truth_for: Sequence[str]) -> Path:
    """A fixtures folder of ``CLIPS`` (their manifest lines and audio), whose truth.csv has the shipped lines
    of the questions ``truth_for`` names and no other (none at all: no truth.csv)."""
    folder.mkdir(parents=True)
    manifest: list[dict[str, str]] = []
    truths: list[list[str]] = []
    for qid, source in CLIPS.items():
        with (source / "manifest.csv").open(encoding="utf-8", newline="") as fh:
            line = next(r for r in csv.DictReader(fh) if r["id"] == qid)
        manifest.append(line)
        (folder / line["audio"]).write_bytes((source / line["audio"]).read_bytes())
        if qid in truth_for:
            with (source / "truth.csv").open(encoding="utf-8", newline="") as fh:
                truths.append(next(r for r in csv.reader(fh) if r[0] == line["audio"]))
    with (folder / "manifest.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(manifest[0]))
        writer.writeheader()
        writer.writerows(manifest)
    if truths:
        with (folder / "truth.csv").open("w", encoding="utf-8", newline="") as fh:
            csv.writer(fh).writerows([["audio", "speech_start_ms", "speech_end_ms", "pauses"], *truths])
    return folder


def vad_end_ms(folder: Path, qid: str) -> float:
    """Where the energy VAD ends the clip's speech, as the emulated device finds it (the clip's end if never)."""
    fixture = next(q for q in load_fixtures(folder).questions if q.id == qid)
    frames = load_audio(fixture.audio).frames
    end = asyncio.run(speech_end_ms(build_vad(ENERGY, Engines(), fixture), frames))
    return end if end is not None else len(frames) * FRAME_MS


def played(folder: Path) -> dict[str, PlayedQuestion]:
    return {q.question_id: q for q in load_questions(folder, ENERGY)}


def test_a_question_with_a_truth_ends_its_speech_there_and_one_without_where_the_vad_does(tmp_path: Path) -> None:
    folder = fixtures_folder(tmp_path / "fixtures", ["en02_paused"])
    asked = played(folder)
    truth_ms = read_truth(PAUSED / "truth.csv")["en02_paused.wav"].speech_end_ms
    assert asked["en02_paused"].speech_end_s == truth_ms / 1000
    assert asked["en02_paused"].speech_end_from == "truth"
    assert asked["en01"].speech_end_s == vad_end_ms(folder, "en01") / 1000
    assert asked["en01"].speech_end_from == "vad"
    # the paused clip is the case the truth is for: the VAD ends its speech at the pause, long before the user did
    assert vad_end_ms(folder, "en02_paused") < truth_ms - 1000


def test_a_turn_is_measured_from_its_truths_end_not_the_vads(tmp_path: Path) -> None:
    """One recording measured twice: its questions with the truth, and the same clips without. The paused
    question's silence starts at its truth's end (exact to the sample) and differs from the VAD's figure by
    exactly the distance between the two ends; the question without a truth is measured the same both times."""
    asked = played(fixtures_folder(tmp_path / "with", ["en02_paused"]))
    vad_only = played(fixtures_folder(tmp_path / "without", []))
    order = list(CLIPS)
    built = build([asked[q] for q in order], PLAN)
    path = built.write(tmp_path / "device-0.wav")
    rows = measure_recording(path, [asked[q] for q in order])
    by_vad = measure_recording(path, [vad_only[q] for q in order])
    assert [(r.question_id, r.round) for r in rows] == [(t.question_id, t.round) for t in built.turns]
    assert all(r.ok for r in rows + by_vad) and len(by_vad) == len(rows)
    for row, vad_row, turn in zip(rows, by_vad, built.turns, strict=True):
        q = asked[turn.question_id]
        start = turn.speech_end - round(q.speech_end_s * RATE)  # where the clip was played
        assert row.speech_end_s == turn.speech_end / RATE
        assert row.first_audible_ms == (turn.first_audible - turn.speech_end) * 1000 / RATE
        vad_end = start + round(vad_only[turn.question_id].speech_end_s * RATE)
        assert vad_row.speech_end_s == vad_end / RATE and vad_row.speech_end_from == "vad"
        assert vad_row.first_audible_ms == (turn.first_audible - vad_end) * 1000 / RATE
        assert row.first_audible_s == vad_row.first_audible_s  # the answer is where it is: only its start moved
        if turn.question_id == "en02_paused":
            assert row.speech_end_from == "truth" and turn.speech_end - vad_end > RATE  # over a second apart
            assert row.first_audible_ms != vad_row.first_audible_ms
            assert vad_row.first_audible_ms - row.first_audible_ms == pytest.approx(
                (turn.speech_end - vad_end) * 1000 / RATE, abs=1e-9
            )
        else:
            assert row == vad_row and row.speech_end_from == "vad"


def test_a_turn_cut_off_before_its_truths_end_says_which_end_it_waited_for(tmp_path: Path) -> None:
    asked = played(fixtures_folder(tmp_path / "fixtures", ["en02_paused"]))
    built = build([asked[q] for q in CLIPS], PLAN[:1])
    path = tmp_path / "cut.wav"  # ends 50 ms before the user really finished (past the VAD's end at the pause)
    soundfile.write(str(path), built.samples[: built.turns[0].speech_end - 800], RATE, subtype="PCM_16")
    (row,) = measure_recording(path, [asked[q] for q in CLIPS])
    assert not row.ok and "before question 'en02_paused' (round 1) finished speaking" in row.error
    assert row.speech_end_from == "truth" and str(path) in row.error


def test_the_rows_say_which_end_and_read_back(tmp_path: Path) -> None:
    asked = played(fixtures_folder(tmp_path / "fixtures", ["en02_paused"]))
    path = build([asked[q] for q in CLIPS], PLAN).write(tmp_path / "device-0.wav")
    rows = measure_recording(path, [asked[q] for q in CLIPS])
    out = tmp_path / "rows.csv"
    write_rows(out, rows)
    with out.open(encoding="utf-8", newline="") as fh:
        lines = list(csv.DictReader(fh))
    assert tuple(lines[0]) == COLUMNS and COLUMNS[-2:] == ("speech_end_from", "rise_ms")
    assert [(r["question_id"], r["speech_end_from"]) for r in lines] == [
        ("en02_paused", "truth"),
        ("en01", "vad"),
        ("en02_paused", "truth"),
    ]
    assert read_rows(out) == rows


def test_rows_written_before_the_column_were_measured_from_the_vad(tmp_path: Path) -> None:
    old = tmp_path / "old.csv"
    header = "run_id,device,question_id,round,first_audible_ms,measured_by,ok,error\n"
    old.write_text(header + ",d,en01,1,812.5,acoustic,true,\n,d,,,,acoustic,false,d.wav: silent\n", encoding="utf-8")
    assert [r.speech_end_from for r in read_rows(old)] == ["vad", ""]


def test_a_bad_end_source_is_refused_naming_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    header = "run_id,device,question_id,round,first_audible_ms,measured_by,ok,error,speech_end_from\n"
    bad.write_text(header + ",d,en01,1,812.5,acoustic,true,,silero\n", encoding="utf-8")
    with pytest.raises(AcousticError, match=r"bad\.csv:2: speech_end_from 'silero' is neither truth nor vad"):
        read_rows(bad)


def test_a_folder_whose_every_question_has_a_truth_loads_no_vad(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command on such a folder measures from the truths alone: the VAD (and its model) is never loaded."""
    folder = fixtures_folder(tmp_path / "fixtures", list(CLIPS))

    def no_vad(*_: object) -> None:
        raise AssertionError("the VAD was loaded for questions that all have a truth")

    monkeypatch.setattr(questions_module, "load_engines", no_vad)
    asked = load_questions(folder)
    assert [q.speech_end_from for q in asked] == ["truth", "truth"]
    recording = build(asked, PLAN).write(tmp_path / "device-0.wav")
    out = tmp_path / "rows.csv"
    argv = ["measure", str(recording), "--questions", str(folder), "--out", str(out), "--config", str(SIMULATOR)]
    assert command.main(argv) == 0
    assert {r.speech_end_from for r in read_rows(out)} == {"truth"}


def test_the_command_measures_in_the_replays_order_with_rounds(tmp_path: Path) -> None:
    """``--rounds 2`` on device 1's recording: the fixtures started at question 1, twice; every question played is
    a row, in that order. A bad count is refused."""
    folder = fixtures_folder(tmp_path / "fixtures", list(CLIPS))
    asked = load_questions(folder)
    recording = build(asked, [(1, 0.8, 1.0), (0, 1.0, 0.9), (1, 0.6, 1.1), (0, 0.9, 1.0)]).write(tmp_path / "1.wav")
    out = tmp_path / "rows.csv"
    argv = ["measure", str(recording), "--questions", str(folder), "--out", str(out), "--rounds", "2"]
    assert command.main(argv) == 0
    rows = read_rows(out)
    assert [(r.question_id, r.round, r.ok) for r in rows] == [
        (asked[1].question_id, 1, True),
        (asked[0].question_id, 1, True),
        (asked[1].question_id, 2, True),
        (asked[0].question_id, 2, True),
    ]
    assert command.main([*argv[:-1], "0"]) == 2
