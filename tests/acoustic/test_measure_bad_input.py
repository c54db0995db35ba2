"""Recordings the acoustic measurement cannot (wholly) use: each gives a clear error naming the file, and the
other turns and recordings are still measured; the command writes every row it has and exits non-zero."""

from __future__ import annotations

import csv
import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from pipeline.acoustic import __main__ as command
from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.questions import PlayedQuestion
from tests.acoustic_synth import FIXTURES, build, of_language
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
SIMULATOR = ROOT / "configs" / "simulator.toml"  # its VAD is the energy one: no model to load
PLAN = [(0, 0.9, 1.2), (1, 1.1, 1.0), (0, 0.7, 1.5)]


def asked() -> list[PlayedQuestion]:
    return of_language("en", 2)


def test_a_recording_with_no_speech_says_so(tmp_path: Path) -> None:
    path = tmp_path / "quiet.wav"
    rng = np.random.default_rng(3)
    soundfile.write(str(path), (rng.standard_normal((16000 * 5, 2)) * 20).astype(np.int16), 16000, subtype="PCM_16")
    (row,) = measure_recording(path, asked())
    assert not row.ok and str(path) in row.error and "no question found" in row.error
    assert row.question_id == "" and row.measured_by == "acoustic"


def test_a_recording_shorter_than_its_questions_says_so(tmp_path: Path) -> None:
    path = tmp_path / "short.wav"
    soundfile.write(str(path), np.zeros((8000, 2), dtype=np.int16), 16000, subtype="PCM_16")
    (row,) = measure_recording(path, asked())
    assert not row.ok and str(path) in row.error and "shorter than any question" in row.error


def test_a_recording_cut_off_in_a_question_keeps_the_turns_before(tmp_path: Path) -> None:
    built = build(asked(), PLAN)
    cut = built.turns[2].speech_end - 4000  # a quarter second before the third question's speech ends
    path = tmp_path / "cut.wav"
    soundfile.write(str(path), built.samples[:cut], 16000, subtype="PCM_16")
    rows = measure_recording(path, asked())
    assert [r.ok for r in rows] == [True, True, False]
    assert str(path) in rows[2].error and "before question 'en01' (round 2) finished speaking" in rows[2].error


def test_a_turn_without_an_answer_fails_alone(tmp_path: Path) -> None:
    built = build(asked(), PLAN)
    samples = built.samples.copy()
    samples[built.turns[1].speech_end : built.turns[1].last_audible + 1, 1] = 0
    path = tmp_path / "unanswered.wav"
    soundfile.write(str(path), samples, 16000, subtype="PCM_16")
    rows = measure_recording(path, asked())
    assert [r.ok for r in rows] == [True, False, True]
    assert str(path) in rows[1].error and "no audible answer to question 'en02' (round 1)" in rows[1].error
    assert rows[2].first_audible_s == built.turns[2].first_audible / 16000


def test_clipped_audio_is_measured_and_noted(tmp_path: Path) -> None:
    built = build(asked(), PLAN)
    samples = built.samples.copy()
    loud = built.turns[0].first_audible + 3000  # clipped inside the answer, after its first sound
    samples[loud : loud + 200, 1] = 32767
    path = tmp_path / "clipped.wav"
    soundfile.write(str(path), samples, 16000, subtype="PCM_16")
    rows = measure_recording(path, asked())
    assert all(r.ok and not r.error for r in rows)
    assert all("clipped at full scale (speaker 200 samples)" in r.note for r in rows)
    assert [r.first_audible_s for r in rows] == [t.first_audible / 16000 for t in built.turns]


def test_a_mono_file_where_stereo_was_promised_names_the_file(tmp_path: Path) -> None:
    built = build(asked(), PLAN[:1])
    path = built.write(tmp_path / "one-channel.wav", channels=1)
    (row,) = measure_recording(path, asked(), layout="stereo")
    assert not row.ok and str(path) in row.error and "1 channel" in row.error and "--layout mono" in row.error


def test_a_wav_cut_short_is_measured_as_far_as_it_goes_and_says_so(tmp_path: Path) -> None:
    """Attack (issue 43): a WAV whose header claims more than the file holds was read without a word."""
    built = build(asked(), PLAN)
    path = built.write(tmp_path / "cut.wav")
    data = bytearray(path.read_bytes())
    at = data.index(b"data") + 4  # the data chunk's size: 16000 frames more than follow it
    claimed = int.from_bytes(data[at : at + 4], "little") + 16000 * 4
    data[at : at + 4] = claimed.to_bytes(4, "little")
    path.write_bytes(bytes(data))
    rows = measure_recording(path, asked())
    frames = len(built.samples)
    said = f"the header claims {frames + 16000} frames ({(frames + 16000) / 16000:.3f} s), the file holds {frames}"
    assert all(r.ok for r in rows) and all(said in r.note and "cut short" in r.note for r in rows)
    assert [r.first_audible_s for r in rows] == [t.first_audible / 16000 for t in built.turns]


def test_a_stereo_file_given_as_mono_says_what_the_mix_did(tmp_path: Path) -> None:
    built = build(asked(), PLAN[:1])
    path = built.write(tmp_path / "two-channels.wav")
    (row,) = measure_recording(path, asked(), layout="mono")
    assert "2 channels mixed to one microphone (RMS " in row.note
    assert "a sound in one channel alone is 6.0 dB softer in the mix" in row.note and "--layout stereo" in row.note


@pytest.mark.parametrize("content", [b"", b"RIFF\x00\x00\x00\x00WAVEjunk", b"not audio at all"])
def test_an_unreadable_file_names_itself(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "broken.wav"
    path.write_bytes(content)
    (row,) = measure_recording(path, asked())
    assert not row.ok and row.error.startswith(f"{path}: unreadable audio")


def test_a_missing_file_names_itself(tmp_path: Path) -> None:
    (row,) = measure_recording(tmp_path / "nowhere.wav", asked())
    assert not row.ok and row.error == f"{tmp_path / 'nowhere.wav'}: recording not found"


def test_the_command_writes_every_row_it_has_and_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = build(asked(), PLAN).write(tmp_path / "good.wav")
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"not audio at all")
    out = tmp_path / "rows.csv"
    argv = ["measure", str(good), str(broken), "--questions", str(FIXTURES), "--out", str(out)]
    assert command.main([*argv, "--config", str(SIMULATOR)]) == 1
    with out.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["device"], r["question_id"], r["round"], r["ok"]) for r in rows] == [
        ("good", "en01", "1", "true"),
        ("good", "en02", "1", "true"),
        ("good", "en01", "2", "true"),
        ("broken", "", "", "false"),
    ]
    assert str(broken) in rows[3]["error"] and str(broken) in capsys.readouterr().err


def test_the_command_exits_zero_when_every_turn_was_measured(tmp_path: Path) -> None:
    good = build(asked(), PLAN).write(tmp_path / "good.wav")
    out = tmp_path / "rows.csv"
    argv = ["measure", str(good), "--questions", str(FIXTURES), "--out", str(out), "--config", str(SIMULATOR)]
    assert command.main(argv) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 1 + len(PLAN)


def test_unusable_questions_stop_the_command_before_any_recording(tmp_path: Path) -> None:
    out = tmp_path / "rows.csv"
    args = ["measure", str(tmp_path / "x.wav"), "--questions", str(tmp_path / "none"), "--out", str(out)]
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.acoustic", *args, "--config", str(SIMULATOR)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and str(tmp_path / "none") in result.stderr and not out.exists()


def test_run_says_clearly_when_it_cannot_be_imported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.import_module

    def missing(name: str, package: str | None = None) -> object:
        if name == "pipeline.acoustic.run":
            raise ImportError("No module named 'sounddevice'")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", missing)
    assert command.main(["run", "audio_fixtures/"]) == 2
    assert "pipeline.acoustic.run could not be imported (No module named 'sounddevice')" in capsys.readouterr().err
