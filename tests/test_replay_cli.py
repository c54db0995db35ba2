"""The replay command end to end on the virtual clock, and its handling of bad input."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.turn_row import COLUMNS
from pipeline.replay import main
from tests.fixture_files import make_fixtures, write_manifest, write_wav
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
SIM = ["--config", str(ROOT / "configs" / "simulator.toml")]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args, env={})
    out = capsys.readouterr()
    return code, out.out, out.err


def test_virtual_run_writes_traces_rows_and_an_exact_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1", "q2", "q3"])
    config = tmp_path / "exact.toml"
    config.write_text(
        "[asr.latency]\nfirst_ms = 300\njitter_ms = 0\n"
        "[llm.latency]\nfirst_ms = 200\nper_item_ms = 50\njitter_ms = 0\n"
        "[tts.first_frame]\nfirst_ms = 100\njitter_ms = 0\n"
        "[tts]\nreal_time_factor = 0.5\n"
    )
    code, out, err = run(
        [
            str(fixtures),
            *SIM,
            "--config",
            str(config),
            "--clock",
            "virtual",
            "--rounds",
            "3",
            "--out",
            str(tmp_path / "o"),
            "--run-id",
            "r1",
        ],
        capsys,
    )
    assert code == 0, err
    rows = read_bench_csv(tmp_path / "o" / "bench.csv")
    assert [(r.question_id, r.round, r.warmup, r.ok) for r in rows] == [
        (q, rnd, int(rnd == 1), 1) for rnd in (1, 2, 3) for q in ("q1", "q2", "q3")
    ]
    assert {r.vad_endpoint_ms for r in rows} == {600.0}
    assert {r.first_token_ms for r in rows} == {200.0}
    assert {r.asr_ms for r in rows} == {300.0}
    assert {r.scripted for r in rows} == {"asr,llm,tts"}
    assert "[9/9] round 3 q3: ok" in err
    assert "success 6/6 (100%); 3 warm-up turn(s) excluded from the statistics" in out
    assert "  first_token_ms                       200.0     200.0     200.0     200.0     6/6" in out
    assert "  vad_endpoint_ms                      600.0     600.0     600.0     600.0     6/6" in out
    assert f"traces: {tmp_path / 'o' / 'traces' / 'r1.jsonl'}" in out


def test_the_same_settings_give_the_same_config_id_and_rows_append(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1"])
    common = [str(fixtures), *SIM, "--clock", "virtual", "--rounds", "1", "--out", str(tmp_path / "o")]
    assert run([*common, "--run-id", "a"], capsys)[0] == 0
    assert run([*common, "--run-id", "b", "--rounds", "2"], capsys)[0] == 0
    assert run([*common, "--run-id", "c", "--mode", "per-sentence"], capsys)[0] == 0
    rows = read_bench_csv(tmp_path / "o" / "bench.csv")
    ids = {str(r.run_id): str(r.config_id) for r in rows}
    assert ids["a"] == ids["b"] != ids["c"]


def test_missing_folder_and_empty_folder_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([str(tmp_path / "nope")], capsys)
    assert (code, err.strip()) == (2, f"error: {tmp_path / 'nope'}: folder not found")
    (tmp_path / "empty").mkdir()
    write_manifest(tmp_path / "empty", [("q1", "en", "x", "hi")])
    code, _, err = run([str(tmp_path / "empty")], capsys)
    assert code == 2 and err.startswith(f"error: {tmp_path / 'empty'}: no audio files (.aif") and ".flac" in err
    # a folder of audio without a manifest runs (tests/settings/test_audio.py), unless nothing can tell its language
    (tmp_path / "nomanifest").mkdir()
    write_wav(tmp_path / "nomanifest" / "a.wav")
    code, _, err = run([str(tmp_path / "nomanifest"), *SIM], capsys)
    assert code == 2 and "[asr] impl = 'oracle' cannot tell a language; give --language for: a" in err


def test_bad_files_become_bad_audio_rows_and_the_other_turns_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fx = make_fixtures(tmp_path / "fx", ["good", "corrupt", "missing"])
    (fx / "missing.wav").unlink()
    (fx / "corrupt.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    write_wav(fx / "stray.wav")
    write_wav(fx / "stereo44.wav", rate=44100, channels=2)
    with (fx / "manifest.csv").open("a", encoding="utf-8") as fh:
        fh.write("stereo44,en,knowledge,Stereo?\n")
    code, out, err = run([str(fx), *SIM, "--clock", "virtual", "--rounds", "2", "--out", str(tmp_path / "o")], capsys)
    assert code == 0, err
    assert f"warning: {fx / 'stray.wav'}: audio file has no manifest entry; not run" in err
    assert "question 'missing' has no audio file missing.wav; recorded as bad_audio" in err
    assert f"bad audio: {fx / 'corrupt.wav'}: unreadable WAV" in err
    rows = read_bench_csv(tmp_path / "o" / "bench.csv")
    outcome = {(r.question_id, r.round): (r.ok, r.error) for r in rows}
    assert outcome == {
        (q, rnd): ((1, "") if q in ("good", "stereo44") else (0, "bad_audio"))
        for q in ("good", "corrupt", "missing", "stereo44")
        for rnd in (1, 2)
    }
    notes = {str(r.question_id): str(r.note) for r in rows}
    assert notes["stereo44"] == "2 channels mixed to mono; resampled 44100 Hz -> 16000 Hz"
    assert notes["missing"] == f"{fx / 'missing.wav'}: audio file not found"
    assert "success 2/4 (50%)" in out
    assert "computed over fewer than all measured turns" in out


def test_bad_config_is_refused_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fx = make_fixtures(tmp_path / "fx", ["q1"])
    bad = tmp_path / "bad.toml"
    bad.write_text("[llm]\nmode = 'sometimes'\n")
    code, _, err = run([str(fx), *SIM, "--config", str(bad), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "[llm] mode = 'sometimes': choose one of single, per-sentence" in err
    assert not (tmp_path / "o" / "traces").exists()


def test_a_turn_over_the_time_limit_is_a_timeout_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fx = make_fixtures(tmp_path / "fx", ["q1"])
    code, out, _ = run(
        [str(fx), *SIM, "--clock", "virtual", "--rounds", "2", "--timeout", "2.5", "--out", str(tmp_path)], capsys
    )
    assert code == 0
    rows = read_bench_csv(tmp_path / "bench.csv")
    assert [(r.ok, r.error) for r in rows] == [(0, "timeout"), (0, "timeout")]
    assert "success 0/1 (0%)" in out


@pytest.mark.realtime
def test_a_run_killed_mid_way_keeps_every_finished_turn(tmp_path: Path) -> None:
    fx = make_fixtures(tmp_path / "fx", ["q1", "q2", "q3", "q4"])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline.replay",
            str(fx),
            *SIM,
            "--fast",
            "--rounds",
            "3",
            "--out",
            str(tmp_path / "o"),
            "--run-id",
            "k",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": ""},
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("[2/12]"):
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(10)
    with (tmp_path / "o" / "bench.csv").open(encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == COLUMNS
    assert 2 <= len(rows) - 1 < 12
    trace_lines = (tmp_path / "o" / "traces" / "k.jsonl").read_text().splitlines()
    assert len(trace_lines) == len(rows) - 1  # one line per finished turn, no session line


@pytest.mark.realtime
def test_a_run_stopped_by_sigterm_writes_the_turn_in_flight_as_a_failed_row(tmp_path: Path) -> None:
    from pipeline.analysis.read import read_traces

    fx = make_fixtures(tmp_path / "fx", ["q1", "q2", "q3", "q4"])
    argv = [sys.executable, "-m", "pipeline.replay", str(fx), *SIM, "--fast", "--rounds", "3"]
    argv += ["--out", str(tmp_path / "o"), "--run-id", "t"]
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": ""}
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("[2/12]"):
                break
        proc.send_signal(signal.SIGTERM)  # as an operator's kill, or a CI runner's cancel
        said = proc.stderr.read()
    finally:
        code = proc.wait(20)
    assert code == 143, said
    rows = read_bench_csv(tmp_path / "o" / "bench.csv")
    stopped = [r for r in rows if not r.ok]
    assert len(rows) >= 3 and len(stopped) == 1  # every finished turn, and the one the stop cut
    assert (stopped[0].error, stopped[0].note) == ("stopped", "the run stopped: SIGTERM")
    assert stopped[0] == max(rows, key=lambda r: r.turn_start_ns)
    assert f"stopped by SIGTERM: {len(rows)} turn(s) written, 1 of them cut mid-turn" in said
    assert read_traces([tmp_path / "o" / "traces" / "t.jsonl"], workers=1).rows == rows  # whole lines, the same rows


def input_tokens_per_turn(trace: Path) -> list[int]:
    from pipeline.analysis.traces import ReadProblems, read_trace_file
    from pipeline.tracing import names

    calls = [s for s in read_trace_file(trace, ReadProblems()) if s.name == names.LLM_CALL]
    return [int(str(s.attributes[names.GEN_AI_INPUT_TOKENS])) for s in sorted(calls, key=lambda s: s.start_ns)]


def test_history_rounds_carry_earlier_turns_into_the_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1", "q2", "q3"])
    base = [str(fixtures), *SIM, "--clock", "virtual", "--rounds", "1", "--quiet"]
    with_history = tmp_path / "h.toml"
    with_history.write_text("[llm]\nhistory_rounds = 1\ntools = false\n")
    without = tmp_path / "n.toml"
    without.write_text("[llm]\ntools = false\n")
    assert run([*base, "--config", str(without), "--out", str(tmp_path / "a"), "--run-id", "a"], capsys)[0] == 0
    assert run([*base, "--config", str(with_history), "--out", str(tmp_path / "b"), "--run-id", "b"], capsys)[0] == 0
    fresh = input_tokens_per_turn(tmp_path / "a" / "traces" / "a.jsonl")
    kept = input_tokens_per_turn(tmp_path / "b" / "traces" / "b.jsonl")
    assert fresh[0] == kept[0]  # nothing to remember before the first turn
    assert kept[1] > fresh[1] and kept[2] > fresh[2]  # one earlier exchange rides along
    assert kept[2] - fresh[2] == kept[1] - fresh[1]  # only the last round is kept, not all of them


def test_questions_with_a_truth_are_scored_against_it_and_those_without_are_left_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["whole", "paused", "untold"])
    # "paused": speech 600-1800 ms, a pause of 480 ms, speech again to 2880 ms (60 ms frames of a tone)
    rate, frame = 16000, 960
    tone = (0.25 * np.sin(2 * np.pi * 300 * np.arange(frame) / rate) * 32767).astype("<i2").tobytes()
    silence = bytes(frame * 2)
    with wave.open(str(fixtures / "paused.wav"), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(b"".join([silence] * 10 + [tone] * 20 + [silence] * 8 + [tone] * 10 + [silence] * 20))
    (fixtures / "truth.csv").write_text(
        "audio,speech_start_ms,speech_end_ms,pauses\nwhole.wav,600,1800,\npaused.wav,600,2880,1800-2280\n"
    )
    config = tmp_path / "short.toml"
    config.write_text("[vad]\nsilence_ms = 300\n")
    args = [str(fixtures), *SIM, "--config", str(config), "--clock", "virtual", "--rounds", "1"]
    code, _, err = run([*args, "--out", str(tmp_path / "o"), "--run-id", "r1"], capsys)
    assert code == 0, err
    rows = {r.question_id: r for r in read_bench_csv(tmp_path / "o" / "bench.csv")}
    scored = {q: (r.cut_off, r.utterances, r.endpoint_delay_ms) for q, r in rows.items()}
    assert scored == {"whole": (0, 1, 300.0), "paused": (1, 2, -780.0), "untold": (None, None, None)}
    assert rows["whole"].true_end_first_audio_ms == rows["whole"].first_audio_ms
    assert rows["untold"].true_end_first_audio_ms is None and rows["untold"].first_audio_ms is not None
    first_audio, from_true_end = rows["paused"].first_audio_ms, rows["paused"].true_end_first_audio_ms
    assert first_audio is not None and from_true_end == round(first_audio - 1080.0, 3)
