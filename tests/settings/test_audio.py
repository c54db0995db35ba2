"""Real recordings in: every common file format replays, resampling does not alias, a folder of audio
without a manifest runs (no reference, no invented error rate), and an unusable file costs only itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile

from pipeline.records.bench_csv import read_bench_csv
from pipeline.replay import main
from pipeline.settings.audio import load_audio, to_16k_mono
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
SIM = ["--config", str(ROOT / "configs" / "simulator.toml"), "--clock", "virtual", "--quiet", "--rounds", "1"]
SPEECH_S, LEAD_S, TAIL_S = 1.2, 0.6, 1.2


def speech(rate: int, channels: int = 1) -> np.ndarray:
    """A tone standing in for speech, with silence around it (float, frames x channels)."""
    n = int(rate * (LEAD_S + SPEECH_S + TAIL_S))
    t = np.arange(n) / rate
    mono = np.where((t >= LEAD_S) & (t < LEAD_S + SPEECH_S), 0.25 * np.sin(2 * np.pi * 300 * t), 0.0)
    return np.repeat(mono[:, None], channels, axis=1)


# (file name, sample rate, channels, soundfile format, subtype)
FORMATS = [
    ("flac.flac", 16000, 1, "FLAC", "PCM_16"),
    ("vorbis.ogg", 16000, 1, "OGG", "VORBIS"),
    ("float.wav", 16000, 1, "WAV", "FLOAT"),
    ("extensible24.wav", 16000, 1, "WAVEX", "PCM_24"),
    ("stereo44.wav", 44100, 2, "WAV", "PCM_16"),
    ("narrow8k.wav", 8000, 1, "WAV", "PCM_16"),
]


def test_every_format_replays_to_ok_rows_with_the_right_duration(tmp_path: Path) -> None:
    folder = tmp_path / "fx"
    folder.mkdir()
    for name, rate, channels, kind, subtype in FORMATS:
        soundfile.write(folder / name, speech(rate, channels), rate, format=kind, subtype=subtype)
        assert load_audio(folder / name).duration_ms == pytest.approx(1000 * (LEAD_S + SPEECH_S + TAIL_S), abs=2)
    (folder / "unsupported.xyz").write_bytes(b"not audio at all " * 100)
    lines = ["id,language,category,text,audio"] + [f"{Path(n).stem},en,x,Turn on the light.,{n}" for n, *_ in FORMATS]
    (folder / "manifest.csv").write_text("\n".join([*lines, "unsupported,en,x,Hi.,unsupported.xyz"]) + "\n")
    assert main([str(folder), *SIM, "--out", str(tmp_path / "o")], env={}) == 0
    got = {str(r.question_id): r for r in read_bench_csv(tmp_path / "o" / "bench.csv")}
    for name, rate, channels, *_ in FORMATS:
        row = got[Path(name).stem]
        assert (row.ok, row.error) == (1, ""), (name, row.error)
        if rate != 16000:
            assert f"resampled {rate} Hz -> 16000 Hz" in str(row.note)
        if channels == 2:
            assert "2 channels mixed to mono" in str(row.note)
    assert (got["unsupported"].ok, got["unsupported"].error) == (0, "bad_audio")
    assert "unsupported.xyz: unreadable XYZ" in str(got["unsupported"].note)


def test_a_10_khz_tone_does_not_fold_into_the_16_khz_band() -> None:
    rate = 44100
    t = np.arange(rate) / rate
    tone = 0.5 * np.sin(2 * np.pi * 10_000 * t)
    out, _notes = to_16k_mono(tone[:, None], rate)
    level_db = 20 * np.log10(np.sqrt(np.mean(out[1000:-1000] ** 2)) / np.sqrt(np.mean(tone**2)))
    assert level_db <= -40, level_db  # linear interpolation folds it to 6 kHz almost undamped


@pytest.mark.real
def test_a_folder_without_a_manifest_runs_and_invents_no_error_rate(tmp_path: Path) -> None:
    folder = tmp_path / "memos"
    folder.mkdir()
    shutil.copy(ROOT / "audio_fixtures" / "en05.wav", folder / "memo one.wav")
    soundfile.write(folder / "memo two.flac", soundfile.read(ROOT / "audio_fixtures" / "zh05.wav")[0], 16000)
    config = tmp_path / "whisper.toml"
    config.write_text('[asr]\nimpl = "whisper"\nmodel = "whisper-base"\n')
    args = [str(folder), "--config", str(ROOT / "configs" / "simulator.toml"), "--config", str(config)]
    assert main([*args, "--rounds", "1", "--fast", "--quiet", "--out", str(tmp_path / "o")], env={}) == 0
    rows = {str(r.question_id): r for r in read_bench_csv(tmp_path / "o" / "bench.csv")}
    assert set(rows) == {"memo one", "memo two"}
    assert {r.asr_error_rate for r in rows.values()} == {None}  # no reference text: no error rate
    assert (rows["memo one"].language, rows["memo two"].language) == ("en", "zh")  # detected, recorded
    assert all(r.ok == 1 for r in rows.values())


def test_a_jsonl_manifest_gives_ids_and_defaults_the_language(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "fx"
    folder.mkdir()
    soundfile.write(folder / "a.wav", speech(16000), 16000)
    lines = [{"id": "a", "text": "Turn on the light.", "category": "device_control"}]
    (folder / "manifest.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main([str(folder), *SIM, "--language", "en", "--out", str(tmp_path / "o")], env={}) == 0
    [row] = read_bench_csv(tmp_path / "o" / "bench.csv")
    assert (row.question_id, row.language, row.ok) == ("a", "en", 1)
