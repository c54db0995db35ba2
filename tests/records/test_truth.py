"""The truth manifest (``pipeline.records.truth``): every refusal names its file and line, a truth written reads
back exactly, and the committed truth.csv files load through the fixtures loader and agree with the audio
they describe, sample for sample, so that neither can drift from the other unnoticed."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

from pipeline.records.truth import TRUTH, Pause, Truth, TruthError, read_truth, write_truth
from pipeline.settings.fixtures import FixtureError, load_questions

FIXTURES = Path(__file__).resolve().parents[2] / "audio_fixtures"
FOLDERS = (FIXTURES, FIXTURES / "edge", FIXTURES / "paused")
HEADER = "audio,speech_start_ms,speech_end_ms,pauses\n"
# the definitions docs/tasks/replay.md gives: clean audio is silent at or below ±32, a pause lasts 250 ms or more
SILENCE, MIN_PAUSE_MS, RATE = 32, 250, 16000
SPEECH = 1000  # -30 dBFS: within 200 ms inside a boundary of speech the clean audio reaches it


def written(tmp_path: Path, *lines: str, header: str = HEADER) -> Path:
    path = tmp_path / TRUTH
    path.write_text(header + "".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


GOOD = "a.wav,500,3000,1000-1500;2000-2600"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("a.wav,500,3000,1000-1500;1400-2000", "pause 2 (1400-2000 ms) overlaps or touches pause 1"),
        ("a.wav,500,3000,1000-1500;1500-2000", "pause 2 (1500-2000 ms) overlaps or touches pause 1"),
        ("a.wav,500,3000,2000-2500;1000-1500", "pause 2 (1000-1500 ms) is out of order"),
        ("a.wav,500,3000,200-900", "pause 1 (200-900 ms) is not inside the question (500-3000 ms)"),
        ("a.wav,500,3000,2500-3200", "pause 1 (2500-3200 ms) is not inside the question"),
        ("a.wav,500,3000,500-900", "pause 1 (500-900 ms) is not inside the question"),
        ("a.wav,500,3000,1500-1000", "pause 1 (1500-1000 ms) does not end after it starts"),
        ("a.wav,3000,500,", "speech_end_ms 500 is not after speech_start_ms 3000"),
        ("a.wav,500,500,", "speech_end_ms 500 is not after speech_start_ms 500"),
        ("a.wav,-1,500,", "speech_start_ms -1 is before the clip's first sample"),
        ("a.wav,half,3000,", "speech_start_ms 'half' is not a number"),
        ("a.wav,500,nan,", "speech_end_ms 'nan' is not a finite number"),
        ("a.wav,500,3000,1000-x", "pause 1 end 'x' is not a number"),
        ("a.wav,500,3000,1000", "pause 1 '1000' is not start-end"),
        ("a.wav,500,3000", "3 cells where the columns are 4"),
        ("a.wav,500,3000,,extra", "5 cells where the columns are 4"),
        (",500,3000,", "empty audio name"),
    ],
)
def test_a_bad_line_is_refused_naming_its_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    path = written(tmp_path, "b.wav,100,200,", line)
    with pytest.raises(TruthError) as refused:
        read_truth(path)
    assert str(refused.value).startswith(f"{path}:3: ")
    assert problem in str(refused.value)


def test_a_duplicated_audio_is_refused_naming_both_lines(tmp_path: Path) -> None:
    path = written(tmp_path, GOOD, "b.wav,100,200,", GOOD)
    with pytest.raises(TruthError, match=r":4: audio 'a.wav' already has a truth on line 2$") as refused:
        read_truth(path)
    assert str(refused.value).startswith(f"{path}:4: ")


@pytest.mark.parametrize(
    ("header", "found"),
    [
        ("audio,speech_start_ms,speech_end_ms\n", "found audio, speech_start_ms, speech_end_ms"),
        ("audio,speech_start_ms,speech_end_ms,pauses,voice\n", "found audio, speech_start_ms, speech_end_ms, pauses"),
        ("audio,start,end,pauses\n", "found audio, start, end, pauses"),
        ("", "found nothing"),
    ],
)
def test_a_missing_or_extra_column_is_refused_on_line_1(tmp_path: Path, header: str, found: str) -> None:
    path = written(tmp_path, *([GOOD] if header else []), header=header)
    with pytest.raises(TruthError) as refused:
        read_truth(path)
    assert str(refused.value).startswith(f"{path}:1: the columns must be exactly audio, speech_start_ms")
    assert found in str(refused.value)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("a.wav,500,3600,1000-1500;2000-3500", "pause 2 (2000-3500 ms) lies outside its clip"),
        ("a.wav,500,3200,", "speech_end_ms 3200 lies outside its clip: past the end of clip 'a.wav' (3100 ms)"),
        ("a.wav,3300,3400,", "speech_start_ms 3300 lies outside its clip"),
    ],
)
def test_a_time_past_its_clips_end_is_refused_when_the_durations_are_known(
    tmp_path: Path, line: str, problem: str
) -> None:
    path = written(tmp_path, line)
    read_truth(path)  # without the clip's length nothing says it is too short
    with pytest.raises(TruthError) as refused:
        read_truth(path, {"a.wav": 3100.0})
    assert str(refused.value).startswith(f"{path}:2: ")
    assert problem in str(refused.value)


def test_a_clip_with_no_duration_given_and_a_time_at_the_clips_very_end_pass(tmp_path: Path) -> None:
    path = written(tmp_path, "a.wav,500,3100,", "b.wav,100,9000,")
    assert set(read_truth(path, {"a.wav": 3100.0})) == {"a.wav", "b.wav"}


def test_a_truth_written_reads_back_exactly_to_the_sample(tmp_path: Path) -> None:
    sample = 1000 / RATE  # 0.0625 ms: a 16 kHz sample, which 4 decimals hold exactly
    truths = [
        Truth("zh.wav", 8001 * sample, 40001 * sample, (Pause(9000 * sample, 20003 * sample),)),
        Truth("sub/en.wav", 500.0, 2000.0),
        Truth("two.wav", 500.0, 4000.0, (Pause(1000.0, 1300.5), Pause(2000.0625, 3999.9375))),
    ]
    path = tmp_path / TRUTH
    write_truth(path, truths)
    assert read_truth(path) == {t.audio: t for t in truths}
    assert path.read_text(encoding="utf-8").splitlines()[1] == "zh.wav,500.0625,2500.0625,562.5-1250.1875"


def test_a_truth_that_would_not_read_back_is_never_written(tmp_path: Path) -> None:
    path = tmp_path / TRUTH
    with pytest.raises(TruthError, match=r":3: pause 1 \(100-200 ms\) is not inside the question"):
        write_truth(path, [Truth("a.wav", 500.0, 900.0), Truth("b.wav", 500.0, 900.0, (Pause(100.0, 200.0),))])
    assert not path.exists()


def test_the_loader_gives_each_question_its_truth_and_refuses_a_bad_one(tmp_path: Path) -> None:
    for name in ("q1", "q2"):
        write_clip(tmp_path / f"{name}.wav", np.zeros(RATE, dtype="<i2"))  # 1 s each
    (tmp_path / "manifest.csv").write_text("id,language,category,text\nq1,en,c,one\nq2,en,c,two\n", encoding="utf-8")
    written(tmp_path, "q1.wav,100,900,300-600", "gone.wav,100,900,")
    questions = load_questions(tmp_path)
    assert [q.truth for q in questions.questions] == [Truth("q1.wav", 100.0, 900.0, (Pause(300.0, 600.0),)), None]
    assert any("'gone.wav' is no question's audio" in w for w in questions.warnings)
    path = written(tmp_path, "q1.wav,100,1200,")  # q1.wav lasts 1,000 ms
    with pytest.raises(FixtureError, match=r"truth\.csv:2: speech_end_ms 1200 lies outside its clip") as refused:
        load_questions(tmp_path)
    assert str(refused.value).startswith(f"{path}:2: ")


def test_the_committed_truths_load_through_the_fixtures_loader() -> None:
    main, edge, paused = (load_questions(folder) for folder in FOLDERS)
    assert all(q.truth is not None for q in main.questions)
    assert [q.id for q in edge.questions if q.truth is not None] == ["long"]
    assert all(q.truth is not None for q in paused.questions)
    assert not [w for qs in (main, edge, paused) for w in qs.warnings]


def test_half_the_paused_set_pauses_inside_its_question_and_its_twin_does_not() -> None:
    questions = load_questions(FIXTURES / "paused").questions
    assert len(questions) >= 40
    assert {q.language for q in questions} == {"zh", "en"}
    assert sum(q.language == "zh" for q in questions) == len(questions) // 2
    pausing = [q for q in questions if q.truth and q.truth.pauses]
    assert sorted(q.id for q in pausing) == sorted(q.id for q in questions if q.id.endswith("_paused"))
    assert len(pausing) == len(questions) // 2
    for q in pausing:
        assert q.truth is not None and 1 <= len(q.truth.pauses) <= 2, q.id
        for pause in q.truth.pauses:
            assert q.truth.speech_start_ms < pause.start_ms < pause.end_ms < q.truth.speech_end_ms, q.id
            assert 300 <= pause.duration_ms <= 1500, q.id
    lengths = sorted(p.duration_ms for q in pausing if q.truth for p in q.truth.pauses)
    assert lengths[0] < 450 and lengths[-1] > 1350  # spread over the range, not bunched


def committed_truths() -> list[tuple[Path, Truth]]:
    return [(folder / audio, t) for folder in FOLDERS for audio, t in read_truth(folder / TRUTH).items()]


@pytest.mark.parametrize(("clip", "truth"), committed_truths(), ids=lambda v: v.name if isinstance(v, Path) else "")
def test_a_clips_truth_matches_its_audio_to_the_sample(clip: Path, truth: Truth) -> None:
    with wave.open(str(clip), "rb") as wav:
        assert wav.getframerate() == RATE
        level = np.abs(np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").astype(np.int32))
    start, end = sample(truth.speech_start_ms), sample(truth.speech_end_ms)
    pauses = [(sample(p.start_ms), sample(p.end_ms)) for p in truth.pauses]
    # silent before and after the question and inside each pause
    silent = [(0, start), (end, len(level)), *pauses]
    assert all(level[a:b].max(initial=0) <= SILENCE for a, b in silent), "sound where the truth says silence"
    # and speech right at every boundary: its sample above the silence, real speech within 200 ms of it
    window = RATE // 5
    onsets = [start] + [b for _, b in pauses]
    ends = [end] + [a for a, _ in pauses]
    assert all(level[i] > SILENCE and level[i : i + window].max() >= SPEECH for i in onsets), "speech starts later"
    assert all(level[i - 1] > SILENCE and level[max(0, i - window) : i].max() >= SPEECH for i in ends), "ends sooner"
    # every silence of a pause's length inside the question is listed: none is left out
    loud = start + np.flatnonzero(level[start:end] > SILENCE)
    gaps = np.flatnonzero(np.diff(loud) - 1 >= MIN_PAUSE_MS * RATE // 1000)
    assert [(int(loud[i]) + 1, int(loud[i + 1])) for i in gaps] == pauses, "a pause left out, or one that is none"


def sample(ms: float) -> int:
    at = ms * RATE / 1000
    assert at == round(at), f"{ms} ms is not a sample boundary at 16 kHz"
    return round(at)


def write_clip(path: Path, samples: np.ndarray) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes(samples.tobytes())
