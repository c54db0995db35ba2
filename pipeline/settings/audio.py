"""A question's audio -> 60 ms frames of 16 kHz mono 16-bit PCM, as a device would send them.

Audio is WAV; other sample rates and stereo are converted to 16 kHz mono, and the
conversion is noted on the turn's row. A file that cannot be used raises ``BadAudio``,
which the run records as that question's ``bad_audio`` turns.
"""

from __future__ import annotations

import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.events import FRAME_BYTES, FRAME_MS, SAMPLE_RATE, AudioFrame


class BadAudio(ValueError):
    """One audio file cannot be used; its turn is recorded as ``bad_audio``."""


@dataclass(frozen=True, slots=True)
class LoadedAudio:
    frames: tuple[AudioFrame, ...]
    duration_ms: int
    note: str = ""  # what was converted, if anything


def load_audio(path: Path) -> LoadedAudio:
    """Decode a WAV file into 60 ms frames of 16 kHz mono 16-bit PCM."""
    if not path.is_file():
        raise BadAudio(f"{path}: audio file not found")
    try:
        with wave.open(str(path), "rb") as wav:
            channels, width, rate, count = wav.getnchannels(), wav.getsampwidth(), wav.getframerate(), wav.getnframes()
            raw = wav.readframes(count)
    except (wave.Error, EOFError, OSError) as exc:
        raise BadAudio(f"{path}: unreadable WAV ({exc})") from None
    if width not in (1, 2, 3, 4) or channels < 1 or rate <= 0:
        raise BadAudio(f"{path}: unsupported WAV format ({channels} channels, {8 * width}-bit, {rate} Hz)")
    if len(raw) < channels * width:
        raise BadAudio(f"{path}: no audio samples")
    if len(raw) % (channels * width):
        raise BadAudio(f"{path}: truncated WAV ({len(raw)} bytes of data is not a whole number of samples)")
    samples = _to_float(raw, width).reshape(-1, channels)
    notes = []
    mono = samples.mean(axis=1)
    if channels != 1:
        notes.append(f"{channels} channels mixed to mono")
    if rate != SAMPLE_RATE:
        mono = _resample(mono, rate, SAMPLE_RATE)
        notes.append(f"resampled {rate} Hz -> {SAMPLE_RATE} Hz")
    pcm = (np.clip(mono, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    return LoadedAudio(
        frames=frames_from_pcm(pcm), duration_ms=len(pcm) * 1000 // (2 * SAMPLE_RATE), note="; ".join(notes)
    )


def frames_from_pcm(pcm: bytes) -> tuple[AudioFrame, ...]:
    """Split PCM into 60 ms frames, zero-padding the last one."""
    if len(pcm) % FRAME_BYTES:
        pcm = pcm + bytes(FRAME_BYTES - len(pcm) % FRAME_BYTES)
    return tuple(
        AudioFrame(seq=i, pcm=pcm[o : o + FRAME_BYTES], duration_ms=FRAME_MS)
        for i, o in enumerate(range(0, len(pcm), FRAME_BYTES))
    )


def _to_float(raw: bytes, width: int) -> np.ndarray:
    if width == 1:
        return (np.frombuffer(raw, dtype=np.uint8).astype(np.float64) - 128) / 128
    if width == 2:
        return np.frombuffer(raw, dtype="<i2").astype(np.float64) / 32768
    if width == 3:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        return v.astype(np.float64) / (1 << 23)
    return np.frombuffer(raw, dtype="<i4").astype(np.float64) / (1 << 31)


def _resample(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Linear-interpolation resampling: enough for a VAD and a test signal, noted on the row."""
    n = max(1, round(len(x) * dst / src))
    resampled: np.ndarray = np.interp(np.arange(n) * (src / dst), np.arange(len(x)), x)
    return resampled
