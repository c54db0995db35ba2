"""A room microphone's answer onset against what is not an answer: the question's reverberant tail, which dips
under the quiet level and rises again, and a microphone's DC offset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile

from pipeline.acoustic import onset
from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.room import render_room
from tests.acoustic_synth import build, of_language

pytest.importorskip("pyroomacoustics")

TOLERANCE_MS = 20.0


def dips_and_rises(x: np.ndarray, rate: int, begin: int, before: int, floor: float) -> bool:
    """Whether the envelope after ``begin`` falls under ``QUIET_DB`` over the floor and then, before ``before``,
    rises ``ONSET_DB`` over it and holds ``EDGE_DB`` for ``HOLD_MS``: what the old rule took for the answer."""
    level = 10 * np.log10(np.maximum(onset.envelope(x[begin:before], rate, rate // 1000), 1e-30) / floor)
    quiet = np.nonzero(level < onset.QUIET_DB)[0]
    hold = int(onset.HOLD_MS)
    if not len(quiet):
        return False
    for i in np.nonzero(level[quiet[0] :] >= onset.ONSET_DB)[0] + quiet[0]:
        if np.all(level[i : i + hold] >= onset.EDGE_DB) and i + hold <= len(level):
            return True
    return False


def test_a_reverberant_tail_that_dips_and_rises_again_is_not_the_answer(tmp_path: Path) -> None:
    """RT60 0.8 s at SNR 30 dB, answers 1.2-1.8 s after the end of speech: after a question's end the tail dips
    under the quiet level and rises again (checked: the old rule's false onset), and the answer is still found
    where the device began to speak."""
    asked = of_language("zh", 6)
    built = build(asked, [(i, 1.2 + 0.12 * i, 1.0) for i in range(6)], seed=7)
    room = render_room(built.samples.astype(np.float64) / 32768, built.rate, seed=7, snr_db=30.0, rt60=0.8)
    path = tmp_path / "tail.wav"
    soundfile.write(str(path), room.mic, built.rate, subtype="PCM_16")
    heard, _ = soundfile.read(str(path))
    floor = onset.noise_floor(heard, built.rate)
    shifted = [(t.speech_end + room.shift_of(0), t.first_audible + room.shift_of(1)) for t in built.turns]
    assert any(dips_and_rises(heard, built.rate, end, first - 5 * 16, floor) for end, first in shifted)
    rows = measure_recording(path, asked, layout="mono", schedule=list(range(6)))
    for row, (_, first) in zip(rows, shifted, strict=True):
        assert row.ok and row.first_audible_s is not None, row.error
        assert abs(row.first_audible_s * built.rate - first) * 1000 / built.rate <= TOLERANCE_MS


def test_a_microphones_dc_offset_is_not_noise(tmp_path: Path) -> None:
    """A cheap microphone's DC offset (0.1 of full scale, ten times the noise's level) is taken out before the noise
    floor is measured: the answers are found where they begin, not once they rise 6 dB over the offset's power."""
    asked = of_language("en", 4)
    built = build(asked, [(i, 0.8 + 0.2 * i, 1.0) for i in range(4)], seed=3)
    room = render_room(built.samples.astype(np.float64) / 32768, built.rate, seed=3, snr_db=30.0, rt60=0.2)
    path = tmp_path / "offset.wav"
    soundfile.write(str(path), np.clip(room.mic + 0.1, -1, 1), built.rate, subtype="PCM_16")
    rows = measure_recording(path, asked, layout="mono", schedule=list(range(4)))
    for row, truth in zip(rows, built.turns, strict=True):
        assert row.ok and row.first_audible_s is not None, row.error
        error_ms = (row.first_audible_s * built.rate - truth.first_audible - room.shift_of(1)) * 1000 / built.rate
        assert abs(error_ms) <= TOLERANCE_MS


def test_the_rumble_is_taken_out_only_where_the_floor_is_made_of_it() -> None:
    """A DC offset is the floor: taken out. A recording with no noise (a sound server's sink) or with white noise
    keeps its samples: the high-pass would only thin an answer's last low notes."""
    rng = np.random.default_rng(1)
    speech = np.sin(2 * np.pi * 150 * np.arange(16000) / 16000) * 0.1
    quiet = np.concatenate((np.zeros(32000), speech, np.zeros(32000)))
    noisy = quiet + rng.standard_normal(len(quiet)) * 0.001
    assert onset.without_rumble(quiet + 0.05, 16000)[1]
    assert not onset.without_rumble(quiet, 16000)[1]
    kept, taken = onset.without_rumble(noisy, 16000)
    assert not taken and np.array_equal(kept, noisy)
