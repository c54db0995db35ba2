"""The energy VAD: a frame is speech when it is louder than a threshold (simple, deterministic, fooled by noise)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stages.registry import Implementation, TurnInputs
from stages.vad.endpointer import FrameVad, check_end_pointing


def frame_dbfs(pcm: bytes) -> float:
    """RMS level of 16-bit PCM in dB relative to full scale (-120 for digital silence)."""
    samples = np.frombuffer(pcm[: len(pcm) - len(pcm) % 2], dtype="<i2").astype(np.int64)
    if not samples.size:
        return -120.0
    mean_sq = int(samples @ samples) / samples.size  # integer sum of squares: exact, as before
    if mean_sq <= 0:
        return -120.0
    return 10 * math.log10(mean_sq / (32768.0 * 32768.0))


class EnergyClassifier:
    """Speech is a frame louder than a threshold: simple, deterministic, fooled by noise."""

    name = "energy"

    def __init__(self, threshold_dbfs: float = -45.0) -> None:
        self.threshold_dbfs = threshold_dbfs

    def reset(self) -> None:
        pass

    async def speech_probability(self, pcm: bytes) -> float:
        return 1.0 if frame_dbfs(pcm) > self.threshold_dbfs else 0.0


@dataclass(frozen=True, slots=True)
class EnergySettings:
    """The ``[vad]`` keys of ``impl = "energy"``: the loudness that counts as speech, and the end-pointing."""

    threshold_dbfs: float = -45.0
    silence_ms: int = 600
    min_speech_ms: int = 120
    threshold: float = 0.5

    def __post_init__(self) -> None:
        check_end_pointing(self.threshold, self.silence_ms, self.min_speech_ms)


def _build(s: EnergySettings, _engine: None, _turn: TurnInputs) -> FrameVad:
    return FrameVad(EnergyClassifier(s.threshold_dbfs), s.silence_ms, s.min_speech_ms, s.threshold)


IMPLEMENTATION = Implementation("vad", "energy", EnergySettings, _build)
