"""Uploads decoded as the ASR stages take them (``bodies.py``): the same samples as a fixture file, and an
upload longer than the server's limit refused before it is decoded, however small the file."""

from __future__ import annotations

import io
from typing import cast

import numpy as np
import pytest
import soundfile

from pipeline.endpoints.speech import bodies
from pipeline.events import SAMPLE_RATE
from pipeline.settings.audio import to_16k_mono


def flac(samples: np.ndarray, rate: int) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, samples, rate, format="FLAC", subtype="PCM_16")
    return out.getvalue()


def an_hour_of_silence() -> bytes:
    """The attack: one hour of silence at 16 kHz is under 200 KiB of FLAC."""
    return flac(np.zeros(3600 * SAMPLE_RATE, dtype=np.int16), SAMPLE_RATE)


def test_an_upload_is_mixed_and_resampled_to_the_samples_a_fixture_file_gets() -> None:
    rng = np.random.default_rng(7)
    stereo = (rng.normal(0, 0.2, (3 * 44100 + 17, 2)) * 32767).astype(np.int16)  # over several blocks
    data = flac(stereo, 44100)
    whole, _ = to_16k_mono(soundfile.read(io.BytesIO(data), dtype="float64", always_2d=True)[0], 44100)
    upload = bodies.decode(data)
    assert upload.pcm == (np.clip(whole, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    assert upload.kind == "FLAC PCM_16" and upload.duration_ms == len(whole) * 1000 // SAMPLE_RATE


def test_an_hour_of_silence_is_refused_by_its_header_before_any_of_it_is_decoded() -> None:
    data = an_hour_of_silence()
    assert len(data) < 200 * 1024
    with pytest.raises(bodies.TooLong, match=r"longer than 1500 s, this server's limit \(its header says 3600 s\)"):
        bodies.decode(data)


def test_audio_up_to_the_limit_is_decoded_and_a_frame_more_is_not() -> None:
    second = np.zeros(SAMPLE_RATE, dtype=np.int16)
    assert bodies.decode(flac(second, SAMPLE_RATE), max_s=1.0).duration_ms == 1000
    with pytest.raises(bodies.TooLong, match=r"longer than 0\.5 s"):
        bodies.decode(flac(second, SAMPLE_RATE), max_s=0.5)


class Endless:
    """A file whose header gives no length (libsndfile's count for "unknown") and whose audio never ends."""

    samplerate, channels, frames = 48000, 2, bodies.UNKNOWN_FRAMES

    def __init__(self) -> None:
        self.read_frames = 0

    def read(self, frames: int, dtype: str, always_2d: bool) -> np.ndarray:
        self.read_frames += frames
        return np.zeros((frames, self.channels))


def test_audio_without_a_length_is_read_only_up_to_the_limit() -> None:
    endless = Endless()
    with pytest.raises(bodies.TooLong, match="more than 2 s read"):
        bodies.read_16k(cast(soundfile.SoundFile, endless), max_s=2.0)
    assert 2 * 48000 < endless.read_frames <= 2 * 48000 + bodies.BLOCK_FRAMES
