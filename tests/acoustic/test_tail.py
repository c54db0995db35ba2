"""The question's own sound after its end of speech is not the answer: the clip's trailing noise, played and
heard, and the room's tail of it, are predicted from the clip (``tail``) and an answer must rise above them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile

from pipeline.acoustic.measure import measure_recording
from pipeline.acoustic.questions import PlayedQuestion
from tests.acoustic_synth import build, of_language


def with_trailing_noise(q: PlayedQuestion, level: float, seed: int) -> PlayedQuestion:
    """The clip with background noise from its end of speech to its end, as a clip recorded in a noisy room has."""
    pcm = q.pcm.astype(np.float64).copy()
    end = round(q.speech_end_s * q.sample_rate)
    pcm[end:] += np.random.default_rng(seed).standard_normal(len(pcm) - end) * level
    return q._replace(pcm=pcm.astype(np.float32))


def test_a_clips_own_trailing_noise_is_not_the_answer(tmp_path: Path) -> None:
    """The clip's noise after the words (20 dB over the room's) is heard before the answer; the answer is where
    the device began to speak (within 20 ms), not where the clip's noise was (its end of speech)."""
    asked = [with_trailing_noise(q, 0.01, n) for n, q in enumerate(of_language("en", 3))]
    built = build(asked, [(i, 0.4 + 0.1 * i, 1.0) for i in range(3)], seed=2)
    mono = built.samples.astype(np.float64).sum(axis=1) / 32768
    mono += np.random.default_rng(5).standard_normal(len(mono)) * 0.001
    path = tmp_path / "noisy-clip.wav"
    soundfile.write(str(path), mono, built.rate, subtype="PCM_16")
    rows = measure_recording(path, asked, layout="mono", schedule=[0, 1, 2])
    assert all(r.ok for r in rows), [r.error for r in rows]
    for row, truth in zip(rows, built.turns, strict=True):
        assert row.first_audible_ms is not None and row.rise_ms is not None
        expected = (truth.first_audible - truth.speech_end) * 1000 / built.rate
        assert abs(row.first_audible_ms - expected) <= 20.0, (row.first_audible_ms, expected)
        assert row.rise_ms >= row.first_audible_ms  # the rise above the noise comes at or after the first sound
