"""The acoustic measurement through a simulated room: one microphone hears the person and the device, with
reverberation, noise at 20 dB SNR and a sound-card latency it is not told; the questions are the shipped
fixtures of both languages. The truth is the stereo recording's, carried into the room by where each
source's direct sound lands (``RoomRender.shift_of``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile

from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.questions import PlayedQuestion
from pipeline.acoustic.room import LATENCY_MS, Noise, render_room
from tests.acoustic_synth import Built, answer, build, of_language, spoken_part

pytest.importorskip("pyroomacoustics")

TOLERANCE_MS = 20.0  # the agreement in a room
TURNS = 8


def plan(seed: int) -> list[tuple[int, float, float]]:
    rng = np.random.default_rng(seed)
    return [(i, float(rng.uniform(0.6, 2.5)), float(rng.uniform(0.8, 3.0))) for i in range(TURNS)]


def played(asked: list[PlayedQuestion], built: Built) -> list[PlayedQuestion]:
    """The questions in the order the recording plays them (a reverberant room needs the order: align)."""
    by_id = {q.question_id: q for q in asked}
    return [by_id[t.question_id] for t in built.turns]


def measured_in_room(
    tmp_path: Path, asked: list[PlayedQuestion], built: Built, seed: int, latency_ms: float
) -> list[tuple[float, float]]:
    """Per turn: (first audible error in the room, silence error against the stereo truth), in ms."""
    room = render_room(built.samples.astype(np.float64) / 32768, built.rate, seed=seed, latency_ms=latency_ms)
    path = tmp_path / f"room-{seed}.wav"
    soundfile.write(str(path), room.mic, built.rate, subtype="PCM_16")
    rows = measure_recording(path, asked, layout="mono", schedule=[asked.index(q) for q in played(asked, built)])
    assert [(r.question_id, r.round) for r in rows] == [(t.question_id, t.round) for t in built.turns]
    errors = []
    ms = 1000 / built.rate
    for row, truth in zip(rows, built.turns, strict=True):
        assert row.ok, row.error
        assert row.speech_end_s is not None and row.first_audible_s is not None and row.first_audible_ms is not None
        speech_end = row.speech_end_s * built.rate - truth.speech_end - room.shift_of(0)
        assert abs(speech_end * ms) < 1.0  # the question found within a millisecond of its direct sound
        first = (row.first_audible_s * built.rate - truth.first_audible - room.shift_of(1)) * ms
        errors.append((first, row.first_audible_ms - (truth.first_audible - truth.speech_end) * ms))
    return errors


@pytest.mark.parametrize(("language", "latency_ms", "seed"), [("en", 40.0, 1), ("zh", 150.0, 2), ("en", 95.0, 3)])
def test_first_audible_within_20_ms_through_a_room(tmp_path: Path, language: str, latency_ms: float, seed: int) -> None:
    asked = of_language(language, TURNS, skip=seed)
    errors = measured_in_room(tmp_path, asked, build(asked, plan(seed), seed=seed), seed, latency_ms)
    assert max(abs(first) for first, _ in errors) <= TOLERANCE_MS, errors
    assert max(abs(silence) for _, silence in errors) <= TOLERANCE_MS, errors


@pytest.mark.parametrize("language", ["en", "zh"])
def test_real_speech_answers_through_a_room(tmp_path: Path, language: str) -> None:
    """Answers that are real speech (other fixtures' clips, never asked, so never taken for a question). Some
    begin with a breath or a fricative far under the room's noise, which no listener there hears either: those
    are found late. Measured on these 16 turns per language: English median 6.6 ms, 12 within 20 ms (worst 41.6 ms,
    found late); Chinese median 3.6 ms, 14 within 20 ms (worst 22.6 ms); the test holds the median and the
    share within 20 ms."""
    asked = of_language(language, TURNS)
    answers = [spoken_part(q, 16000) for q in of_language(language, 7, skip=TURNS)]
    errors = []
    for seed, latency_ms in enumerate(LATENCY_MS):
        built = build(asked, [(i, 0.6 + 0.25 * i, 0.0) for i in range(TURNS)], seed=seed, answers=answers)
        errors += measured_in_room(tmp_path, asked, built, seed, latency_ms)
    firsts = [abs(first) for first, _ in errors]
    assert float(np.median(firsts)) <= 10.0, errors
    assert sum(f <= TOLERANCE_MS for f in firsts) >= 0.75 * len(firsts), errors


def test_the_questions_own_reverberation_is_not_the_answer(tmp_path: Path) -> None:
    """A reverberant room (RT60 0.8 s) and answers 250-500 ms after the end of speech, while the question's
    tail is still dying away: the answer is where the device began to speak, not where the tail was loud."""
    asked = of_language("zh", 6)
    built = build(asked, [(i, 0.25 + 0.05 * i, 1.5) for i in range(6)], seed=5)
    room = render_room(built.samples.astype(np.float64) / 32768, built.rate, seed=5, latency_ms=100, rt60=0.8)
    path = tmp_path / "reverberant.wav"
    soundfile.write(str(path), room.mic, built.rate, subtype="PCM_16")
    rows = measure_recording(path, asked, layout="mono", schedule=list(range(6)))
    assert len(rows) == len(built.turns) and all(r.ok for r in rows)
    for row, truth in zip(rows, built.turns, strict=True):
        assert row.first_audible_s is not None
        error_ms = (row.first_audible_s * built.rate - truth.first_audible - room.shift_of(1)) * 1000 / built.rate
        assert abs(error_ms) <= TOLERANCE_MS


def test_the_room_is_seeded_and_its_latency_drawn_in_range() -> None:
    built = build(of_language("en", 2), [(0, 0.8, 1.0), (1, 0.8, 1.0)])
    stereo = built.samples.astype(np.float64) / 32768
    one, again, other = (render_room(stereo, built.rate, seed=s) for s in (7, 7, 8))
    assert np.array_equal(one.mic, again.mic) and not np.array_equal(one.mic, other.mic)
    for render in (one, other):
        assert LATENCY_MS[0] <= render.latency * 1000 / built.rate <= LATENCY_MS[1]
        assert len(render.mic) == len(stereo) + render.latency
    assert one.device_delay < one.person_delay  # the device is nearer the microphone than the person


def schroeder_rt60(x: np.ndarray, rate: int) -> float:
    """T30 of a decay, by the textbook: the backward-integrated energy's fit from -5 to -35 dB, times two."""
    energy = np.cumsum(np.square(x[::-1]))[::-1]
    db = 10 * np.log10(energy / energy[0] + 1e-300)
    fit = np.nonzero((db <= -5) & (db >= -35))[0]
    slope = np.polyfit(fit / rate, db[fit], 1)[0]
    return float(-60.0 / slope)


@pytest.mark.parametrize(("rt60", "distance_m", "rate"), [(0.2, None, 16000), (0.5, 1.5, 8000), (0.8, 3.0, 16000)])
def test_the_room_decays_as_asked(rt60: float, distance_m: float | None, rate: int) -> None:
    """A click said by the person, heard by the room's microphone without noise, decays within 20 % of the RT60 asked
    (at the old fixed reflection order 3, an RT60 of 0.6 s decayed in 0.057 s), and the render says what it measured."""
    stereo = np.zeros((round(2.0 * rate), 2))
    stereo[100, 0] = 0.5
    room = render_room(stereo, rate, seed=1, snr_db=300.0, latency_ms=0.0, rt60=rt60, distance_m=distance_m)
    heard = schroeder_rt60(room.mic[room.shift_of(0) :], rate)
    assert abs(heard - rt60) <= 0.2 * rt60, (heard, rt60)
    assert abs(room.rt60 - rt60) <= 0.2 * rt60 and room.max_order > 3


def test_the_person_and_the_device_stand_at_the_distance_asked() -> None:
    """Both at the distance asked (their direct sounds land together), and 3 m is 1.5 m further than 1.5 m."""
    stereo = np.zeros((8000, 2))
    near, far = (render_room(stereo, 16000, seed=1, latency_ms=0.0, rt60=0.2, distance_m=d) for d in (1.5, 3.0))
    for room in (near, far):
        assert abs(room.device_delay - room.person_delay) <= 1
    assert abs((far.person_delay - near.person_delay) / 16000 * 343.0 - 1.5) < 0.03  # at the speed of sound


def test_a_room_needs_a_stereo_recording() -> None:
    with pytest.raises(ValueError, match="stereo"):
        render_room(np.zeros((100, 1)), 16000, seed=1)


def soft_start(seed: int, below_db: float, rate: int = 16000) -> np.ndarray:
    """An answer that begins as a fricative does: 60 ms of noise ``below_db`` under the voiced body that follows."""
    rng = np.random.default_rng(seed)
    body = answer(1.2, rate, seed)
    level = float(np.sqrt(np.mean(np.square(body)))) * 10 ** (-below_db / 20)
    hiss = rng.standard_normal(round(0.060 * rate)) * level
    return np.concatenate((hiss, body))


@pytest.mark.parametrize(
    ("language", "below_db", "latency_ms", "seed"),
    [("zh", 15.0, 60.0, 4), ("en", 20.0, 120.0, 6), ("zh", 25.0, 150.0, 8)],
)
def test_a_soft_start_is_found_within_20_ms(
    tmp_path: Path, language: str, below_db: float, latency_ms: float, seed: int
) -> None:
    """Answers whose first 60 ms are a fricative-like hiss 15-25 dB under their body, in a 20 dB SNR room: the
    answer begins at the hiss, not where the voice rises out of the noise."""
    asked = of_language(language, 6)
    answers = [soft_start(seed + n, below_db) for n in range(3)]
    built = build(asked, [(i, 0.7 + 0.2 * i, 0.0) for i in range(6)], seed=seed, answers=answers)
    errors = measured_in_room(tmp_path, asked, built, seed, latency_ms)
    assert max(abs(first) for first, _ in errors) <= TOLERANCE_MS, errors


@pytest.mark.parametrize(("rate", "noise"), [(48000, "pink"), (8000, "white")])
def test_pink_noise_and_other_rates_through_a_reverberant_room(tmp_path: Path, rate: int, noise: Noise) -> None:
    """RT60 0.5 s at SNR 20 dB, 1.5 m, pink noise at 48 kHz and white at 8 kHz: every turn found, each answer's first
    audible sample within 20 ms (answers with a 10 ms attack: nothing of them lies under the noise for long)."""
    asked = of_language("en", 5)
    built = build(asked, [(i, 0.5 + 0.3 * i, 1.0) for i in range(5)], rate=rate, seed=11)
    room = render_room(
        built.samples.astype(np.float64) / 32768, rate, seed=11, rt60=0.5, distance_m=1.5, noise=noise, latency_ms=70
    )
    path = tmp_path / f"room-{rate}.wav"
    soundfile.write(str(path), room.mic, rate, subtype="PCM_16")
    rows = measure_recording(path, asked, layout="mono", schedule=list(range(5)))
    assert [r.ok for r in rows] == [True] * 5, [r.error for r in rows]
    for row, truth in zip(rows, built.turns, strict=True):
        assert row.first_audible_s is not None
        error_ms = (row.first_audible_s * rate - truth.first_audible - room.shift_of(1)) * 1000 / rate
        assert abs(error_ms) <= TOLERANCE_MS, error_ms
