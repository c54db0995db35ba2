"""The acoustic measurement on clean two-channel recordings (the emulator's layout): every figure exact to the
sample, at the pipeline's rate and at others, rounds counted, the rows written with the contract's columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile

from pipeline.acoustic import bands
from pipeline.acoustic.align import find_occurrences
from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.questions import load_questions
from pipeline.events import FRAME_MS
from pipeline.records.acoustic import COLUMNS, read_rows, write_rows
from pipeline.settings.audio import load_audio
from pipeline.settings.fixtures import load_questions as load_fixtures
from tests.acoustic_synth import ENERGY, FIXTURES, Built, build, fixture_questions, of_language

# question index (into the list given), silence after its end of speech (s), answer length (s)
PLAN = [(0, 0.9, 2.0), (1, 1.3, 1.5), (0, 0.7, 3.0), (2, 2.0, 1.0), (1, 0.45, 0.8)]


def assert_exact(built: Built, path: Path) -> None:
    asked = [*of_language("en", 2), *of_language("zh", 1)]
    rows = measure_recording(path, asked)
    rate = built.rate
    assert [(r.question_id, r.round) for r in rows] == [(t.question_id, t.round) for t in built.turns]
    for row, truth in zip(rows, built.turns, strict=True):
        assert row.ok and not row.error and row.measured_by == "acoustic" and row.device == path.stem
        assert row.speech_end_from == "truth"  # the shipped fixtures carry a truth for every clip
        assert row.speech_end_s == truth.speech_end / rate
        assert row.first_audible_s == truth.first_audible / rate
        assert row.last_audible_s == truth.last_audible / rate
        assert row.first_audible_ms == (truth.first_audible - truth.speech_end) * 1000 / rate
        assert row.whole_turn_ms == (truth.last_audible - truth.speech_end) * 1000 / rate


def test_every_figure_is_exact_to_the_sample_at_the_pipelines_rate(tmp_path: Path) -> None:
    asked = [*of_language("en", 2), *of_language("zh", 1)]
    built = build(asked, PLAN)
    assert [t.round for t in built.turns] == [1, 1, 2, 1, 2]
    assert_exact(built, built.write(tmp_path / "kitchen.wav"))


@pytest.mark.parametrize("rate", [8000, 44100, 48000])
def test_other_sample_rates_are_measured_at_their_own_samples(tmp_path: Path, rate: int) -> None:
    asked = [*of_language("en", 2), *of_language("zh", 1)]
    built = build(asked, PLAN, rate=rate)
    assert_exact(built, built.write(tmp_path / f"device-{rate}.wav"))


def test_a_flac_recording_reads_as_its_wav(tmp_path: Path) -> None:
    asked = [*of_language("en", 2), *of_language("zh", 1)]
    built = build(asked, PLAN[:2])
    assert_exact(built, built.write(tmp_path / "device.flac"))


def test_the_end_of_speech_is_the_questions_truth() -> None:
    """The shipped fixtures carry a truth for every clip: each question's end of speech is its truth's
    (where its user really finished), not where the VAD ends it (``test_measure_truth``: a question without)."""
    fixtures = load_fixtures(FIXTURES).questions
    for q, fixture in zip(fixture_questions(), fixtures, strict=True):
        frames = load_audio(fixture.audio).frames
        assert fixture.truth is not None and q.question_id == fixture.id
        assert q.speech_end_s * 1000 == fixture.truth.speech_end_ms and q.speech_end_from == "truth"
        assert q.sample_rate == 16000 and len(q.pcm) == len(frames) * 960 and q.pcm.dtype == np.float32


def test_a_folder_without_questions_names_itself(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=str(tmp_path)):
        load_questions(tmp_path, ENERGY)


def test_the_rows_carry_the_contracts_columns_and_read_back(tmp_path: Path) -> None:
    asked = [*of_language("en", 2), *of_language("zh", 1)]
    built = build(asked, PLAN)
    path = built.write(tmp_path / "kitchen.wav")
    rows = measure_recording(path, asked, device="desk-1")
    assert {r.recording for r in rows} == {str(path)}  # beyond the contract's columns: the file, for its waveform
    out = tmp_path / "rows.csv"
    assert write_rows(out, rows) == len(PLAN)
    header = out.read_text(encoding="utf-8").splitlines()[0].split(",")
    contract = ["run_id", "device", "question_id", "round", "speech_end_s", "first_audible_s", "last_audible_s"]
    contract += ["first_audible_ms", "whole_turn_ms", "measured_by", "ok", "error"]
    assert header[: len(contract)] == contract and tuple(header) == COLUMNS
    assert ",true," in out.read_text(encoding="utf-8")
    assert read_rows(out) == rows and {r.device for r in rows} == {"desk-1"}


def test_a_late_frame_moves_the_end_of_speech_with_it(tmp_path: Path) -> None:
    """Should the frame holding the end of speech sit a few ms from where the whole clip puts it (the emulator
    places frames by their capture, so only a recorder that placed them by their sends would do this), the
    end of speech is that frame's start + the end's offset in it, as the trace side marks it."""
    asked = [*of_language("en", 2), *of_language("zh", 1)]
    built = build(asked, PLAN)
    samples = built.samples.copy()
    ends = []
    for truth in built.turns:
        q = next(q for q in asked if q.question_id == truth.question_id)
        start = truth.speech_end - round(q.speech_end_s * 16000)
        clip = np.round(q.pcm.astype(np.float64) * 32768).astype(np.int16)
        samples[start : start + len(clip), 0] = 0
        k = int(np.ceil(q.speech_end_s * 1000 / FRAME_MS)) - 1
        for j in range(len(clip) // 960):
            late = 80 if j == k else 0  # the end's own frame 5 ms late, over the next frame's start
            at = start + j * 960 + late
            samples[at : at + 960, 0] = clip[j * 960 : (j + 1) * 960]
        ends.append(start + k * 960 + 80 + round(q.speech_end_s * 16000) - k * 960)
    path = tmp_path / "jittered.wav"
    soundfile.write(str(path), samples, 16000, subtype="PCM_16")
    rows = measure_recording(path, asked)
    assert [r.speech_end_s for r in rows] == [end / 16000 for end in ends]
    assert [r.first_audible_s for r in rows] == [t.first_audible / 16000 for t in built.turns]


def test_a_stereo_file_measured_as_one_room_microphone_is_mixed_down(tmp_path: Path) -> None:
    """``--layout mono`` on the emulator's file: both channels heard by one microphone, no noise, no room."""
    asked = [*of_language("en", 2), *of_language("zh", 1)]
    built = build(asked, PLAN)
    rows = measure_recording(built.write(tmp_path / "mixed.wav"), asked, layout="mono")
    assert all(r.ok and r.note.startswith("2 channels mixed to one microphone (RMS ") for r in rows)
    for row, truth in zip(rows, built.turns, strict=True):
        assert row.speech_end_s == truth.speech_end / 16000
        assert row.first_audible_s is not None and abs(row.first_audible_s * 16000 - truth.first_audible) <= 16  # a ms


def test_a_long_recording_transformed_in_chunks_finds_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = [*of_language("en", 2), *of_language("zh", 1)]
    built = build(asked, PLAN)
    mic = built.samples[:, 0].astype(np.float64) / 32768
    whole = find_occurrences(mic, built.rate, asked)
    monkeypatch.setattr(bands, "CHUNK_FRAMES", 97)  # the band energies in many pieces, clips across their edges
    assert find_occurrences(mic, built.rate, asked) == whole and len(whole) == len(PLAN)
