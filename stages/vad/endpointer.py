"""End-pointing VAD over 60 ms frames, with a pluggable per-frame speech classifier (silero, energy).

The classifier says how likely a frame is speech; the end-pointer turns that
into speech start and end. Speech starts after ``min_speech_ms`` of speech and
ends after ``silence_ms`` of non-speech (the end-point delay, METHOD M4);
hysteresis keeps a word's quiet tail inside the utterance.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from pipeline.events import AudioFrame, Event, SpeechEnd, SpeechStart, StageInfo
from stages.registry import ConfigError, require_positive

HYSTERESIS = 0.15


class FrameClassifier(Protocol):
    """What ``FrameVad`` needs of a classifier: how likely each frame is speech, and a fresh start each turn."""

    name: str

    def reset(self) -> None:
        """Forget everything heard: a new turn starts."""

    async def speech_probability(self, pcm: bytes) -> float:
        """How likely this frame is speech; awaited, so that a model may batch the frames of many streams."""


def check_end_pointing(threshold: float, silence_ms: int, min_speech_ms: int) -> None:
    """Refuses end-pointing settings ``FrameVad`` cannot run with, naming the ``[vad]`` key."""
    if not 0 < threshold < 1:
        raise ConfigError(f"[vad] threshold = {threshold}: a speech probability between 0 and 1")
    require_positive("vad", silence_ms=silence_ms, min_speech_ms=min_speech_ms)


class FrameVad:
    """The VAD stage over a ``FrameClassifier``: frames in, ``SpeechStart``, the utterance's frames and
    ``SpeechEnd`` out; frames before speech is confirmed are held and passed on with its start."""

    def __init__(
        self,
        classifier: FrameClassifier,
        silence_ms: int = 600,
        min_speech_ms: int = 120,
        threshold: float = 0.5,
        profile: str = "",
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
            attributes=(
                *((("vad.profile", profile),) if profile else ()),  # only a classifier with profiles names one
                ("vad.silence_ms", silence_ms),
                ("vad.threshold", threshold),
            ),
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
            p = await self.classifier.speech_probability(event.pcm)
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
