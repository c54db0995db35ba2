"""A room microphone beside what the speaker was fed (layout ``room-feed``): each answer's known waveform found in
the room, so an answer that begins under a noisy room's level is placed at its first audible sample; an answer
the speaker never played is a failed row with its best score; the feed's own timing is never used."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import soundfile

from pipeline.acoustic import __main__ as command
from pipeline.acoustic.feed import HEARD_SCORE, LAG_RATE, feed_lag
from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.questions import load_questions
from pipeline.acoustic.recording import RecordingError, read_recording
from pipeline.acoustic.room import RoomRender, render_room
from pipeline.records.acoustic import read_rows
from tests.acoustic_synth import ENERGY, FIXTURES, Built, build, of_language, spoken_part

pytest.importorskip("pyroomacoustics")

TURNS = 6


def noisy_room(built: Built, seed: int, speaker: np.ndarray | None = None) -> RoomRender:
    """A far, reverberant, noisy room (3 m, RT60 0.6 s, SNR 10 dB): real speech answers begin under its noise.
    ``speaker``, where given, is what the device's speaker really played (else the recording's right channel)."""
    stereo = built.samples.astype(np.float64) / 32768
    if speaker is not None:
        stereo[:, 1] = speaker
    return render_room(stereo, built.rate, seed=seed, snr_db=10.0, rt60=0.6, distance_m=3.0, latency_ms=120.0)


def written(tmp_path: Path, room: RoomRender, feed: np.ndarray, rate: int) -> Path:
    """The room (left) beside the feed (right) on the feed's own timeline: the room hears it ``latency`` later."""
    both = np.zeros((len(room.mic), 2))
    both[:, 0] = np.clip(room.mic, -1, 1)
    both[: min(len(feed), len(both)), 1] = feed[: len(both)]
    path = tmp_path / "room-feed.wav"
    soundfile.write(str(path), both, rate, subtype="PCM_16")
    return path


def speech_answers(language: str) -> Built:
    asked = of_language(language, TURNS)
    answers = [spoken_part(q, 16000) for q in of_language(language, 7, skip=TURNS)]
    return build(asked, [(i, 0.6 + 0.25 * i, 0.0) for i in range(TURNS)], seed=3, answers=answers)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_an_answer_under_the_noise_is_placed_at_its_first_audible_sample(tmp_path: Path, language: str) -> None:
    built = speech_answers(language)
    room = noisy_room(built, seed=2)
    path = written(tmp_path, room, built.samples[:, 1].astype(np.float64) / 32768, built.rate)
    rows = measure_recording(path, of_language(language, TURNS), layout="room-feed", schedule=list(range(TURNS)))
    assert [r.ok for r in rows] == [True] * TURNS, [r.error for r in rows]
    for row, truth in zip(rows, built.turns, strict=True):
        assert row.first_audible_s is not None and row.last_audible_s is not None and row.rise_ms is not None
        first = row.first_audible_s * built.rate - truth.first_audible - room.shift_of(1)
        last = row.last_audible_s * built.rate - truth.last_audible - room.shift_of(1)
        assert abs(first) <= 1 and abs(last) <= 1  # exact to a sample: the waveform's match, not its level
        # the rise above the room's noise is the room's own, never before the first audible sample
        assert row.first_audible_ms is not None and row.rise_ms >= row.first_audible_ms


def test_an_answer_the_speaker_never_played_is_a_failed_row_with_its_best_score(tmp_path: Path) -> None:
    built = speech_answers("en")
    fed = built.samples[:, 1].astype(np.float64) / 32768
    played = fed.copy()
    lost = built.turns[2]
    played[lost.first_audible - 10 : lost.last_audible + 10] = 0.0  # the speaker dropped this answer
    path = written(tmp_path, noisy_room(built, seed=4, speaker=played), fed, built.rate)
    rows = measure_recording(path, of_language("en", TURNS), layout="room-feed", schedule=list(range(TURNS)))
    assert [r.ok for r in rows] == [True, True, False, True, True, True]
    assert [(r.question_id, r.round) for r in rows] == [(t.question_id, 1) for t in built.turns]
    error = rows[2].error
    assert error.startswith(f"{path}: the answer to question 'en03' (round 1) that the feed holds from ")
    assert "was not heard in the room: its best match scored 0.0" in error and f"(needs {HEARD_SCORE:.3f})" in error


def test_a_silent_feed_and_a_turn_it_holds_no_answer_for_are_failed_rows(tmp_path: Path) -> None:
    built = speech_answers("zh")
    room = noisy_room(built, seed=5)
    silent = written(tmp_path, room, np.zeros(len(built.samples)), built.rate)
    rows = measure_recording(silent, of_language("zh", TURNS), layout="room-feed", schedule=list(range(TURNS)))
    assert len(rows) == TURNS and not any(r.ok for r in rows)
    assert all("the speaker's feed (right channel) is silent" in r.error for r in rows)
    fed = built.samples[:, 1].astype(np.float64) / 32768
    gone = built.turns[4]
    fed[gone.first_audible - 10 : gone.last_audible + 10] = 0.0
    rows = measure_recording(
        written(tmp_path, room, fed, built.rate), of_language("zh", TURNS), layout="room-feed", schedule=list(range(6))
    )
    assert [r.ok for r in rows] == [True, True, True, True, False, True]
    assert "the speaker's feed holds no answer to question 'zh05' (round 1) between its end of speech" in rows[4].error


@pytest.mark.parametrize("lag", [0, 1234, -777])
def test_the_feed_s_lag_to_the_room_is_found_to_a_sample_at_8_khz(lag: int) -> None:
    """The recording-wide lag only tells which feed sound is which turn's answer: each is placed at the full rate."""
    rng = np.random.default_rng(1)
    feed = np.zeros(48000)
    feed[8000:20000] = rng.standard_normal(12000)
    room = np.roll(feed, lag) * 0.3 + rng.standard_normal(len(feed)) * 0.1
    found = feed_lag(room, feed, 16000)
    assert found is not None and abs(found - lag) <= 16000 // LAG_RATE
    assert feed_lag(room, np.zeros(len(feed)), 16000) is None


def test_the_room_feed_layout_needs_two_channels(tmp_path: Path) -> None:
    path = tmp_path / "one.wav"
    soundfile.write(str(path), np.zeros(1600), 16000, subtype="PCM_16")
    with pytest.raises(RecordingError, match=r"1 channel; the room-feed layout needs 2 \(left: the room microphone"):
        read_recording(path, "room-feed")


def four_questions(folder: Path) -> Path:
    """A fixtures folder of the first four English questions (manifest lines and audio, no truth)."""
    folder.mkdir(parents=True)
    with (FIXTURES / "manifest.csv").open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        fields, lines = (
            list(reader.fieldnames or []),
            [r for r in reader if r["id"] in ("en01", "en02", "en03", "en04")],
        )
    for line in lines:
        (folder / line["audio"]).write_bytes((FIXTURES / line["audio"]).read_bytes())
    with (folder / "manifest.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(lines)
    return folder


def test_the_command_measures_a_room_beside_its_feed(tmp_path: Path) -> None:
    folder = four_questions(tmp_path / "fixtures")
    asked = load_questions(folder, ENERGY)
    built = build(asked, [(i, 0.7 + 0.2 * i, 1.2) for i in range(4)], seed=6)
    room = noisy_room(built, seed=6)
    path = written(tmp_path, room, built.samples[:, 1].astype(np.float64) / 32768, built.rate)
    out = tmp_path / "rows.csv"
    simulator = FIXTURES.parent / "configs" / "simulator.toml"  # the energy VAD: no model to load
    argv = ["measure", str(path), "--questions", str(folder), "--out", str(out), "--rounds", "1", "--config"]
    assert command.main([*argv, str(simulator), "--layout", "room-feed"]) == 0
    rows = read_rows(out)
    assert [(r.question_id, r.ok) for r in rows] == [(q.question_id, True) for q in asked]
    for row, truth in zip(rows, built.turns, strict=True):
        assert row.first_audible_s is not None
        assert abs(row.first_audible_s * built.rate - truth.first_audible - room.shift_of(1)) <= 1
