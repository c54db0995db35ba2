"""End-pointing VAD over 60 ms frames, with a pluggable per-frame speech classifier.

The classifier says how likely a frame is speech; the end-pointer turns that
into speech start and end. Speech starts after ``min_speech_ms`` of speech and
ends after ``silence_ms`` of non-speech (the end-point delay, METHOD M4);
hysteresis keeps a word's quiet tail inside the utterance.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import AsyncIterator
from typing import Protocol

from pipeline.events import AudioFrame, Event, SpeechEnd, SpeechStart, StageInfo

HYSTERESIS = 0.15


class FrameClassifier(Protocol):
    name: str

    def reset(self) -> None:
        """Forget everything heard: a new turn starts."""

    def speech_probability(self, pcm: bytes) -> float: ...


def frame_dbfs(pcm: bytes) -> float:
    """RMS level of 16-bit PCM in dB relative to full scale (-120 for digital silence)."""
    samples = array("h", pcm)
    if not samples:
        return -120.0
    mean_sq = sum(s * s for s in samples) / len(samples)
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

    def speech_probability(self, pcm: bytes) -> float:
        return 1.0 if frame_dbfs(pcm) > self.threshold_dbfs else 0.0


class FrameVad:
    def __init__(
        self,
        classifier: FrameClassifier,
        silence_ms: int = 600,
        min_speech_ms: int = 120,
        threshold: float = 0.5,
    ) -> None:
        if silence_ms <= 0 or min_speech_ms <= 0:
            raise ValueError("silence_ms and min_speech_ms must be positive")
        self.classifier = classifier
        self.silence_ms = silence_ms
        self.min_speech_ms = min_speech_ms
        self.threshold = threshold
        self.info = StageInfo(
            role="vad",
            impl=classifier.name,
            attributes=(("vad.silence_ms", silence_ms), ("vad.threshold", threshold)),
        )

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        self.classifier.reset()
        offset = 0  # audio time at the start of the current frame
        voiced_run = 0  # consecutive speech before speech is confirmed
        pending: list[AudioFrame] = []
        in_speech = False
        speech_end = 0
        silence = 0
        async for event in events:
            if not isinstance(event, AudioFrame):
                continue
            p = self.classifier.speech_probability(event.pcm)
            frame_end = offset + event.duration_ms
            if not in_speech:
                pending = [*pending, event][-(self.min_speech_ms // event.duration_ms + 1) :]
                voiced_run = voiced_run + event.duration_ms if p >= self.threshold else 0
                if voiced_run >= self.min_speech_ms:
                    in_speech = True
                    speech_end = frame_end
                    yield SpeechStart(offset_ms=frame_end - voiced_run)
                    for frame in pending:
                        yield frame
                    pending = []
            else:
                yield event
                if p >= self.threshold - HYSTERESIS:
                    speech_end = frame_end
                    silence = 0
                else:
                    silence += event.duration_ms
                    if silence >= self.silence_ms:
                        yield SpeechEnd(offset_ms=speech_end)
                        return
            offset = frame_end
        if in_speech:
            # The audio ran out before the silence window closed: the end-point is the end of input.
            yield SpeechEnd(offset_ms=speech_end)
