"""An energy end-pointer: speech is a frame whose RMS level is above a threshold.

Simple and deterministic, it is the VAD of the no-model simulator and of the
virtual-clock tests. The end-point delay it causes is the configured silence
window: the utterance is declared over only after that much quiet.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import AsyncIterator

from pipeline.events import AudioFrame, Event, SpeechEnd, SpeechStart, StageInfo


def frame_dbfs(pcm: bytes) -> float:
    """RMS level of 16-bit PCM in dB relative to full scale (-120 for digital silence)."""
    samples = array("h", pcm)
    if not samples:
        return -120.0
    mean_sq = sum(s * s for s in samples) / len(samples)
    if mean_sq <= 0:
        return -120.0
    return 10 * math.log10(mean_sq / (32768.0 * 32768.0))


class EnergyVad:
    def __init__(self, threshold_dbfs: float = -45.0, silence_ms: int = 600, min_speech_ms: int = 120) -> None:
        if silence_ms <= 0 or min_speech_ms <= 0:
            raise ValueError("silence_ms and min_speech_ms must be positive")
        self.threshold_dbfs = threshold_dbfs
        self.silence_ms = silence_ms
        self.min_speech_ms = min_speech_ms
        self.info = StageInfo(
            role="vad",
            impl="energy",
            attributes=(("vad.silence_ms", silence_ms), ("vad.threshold_dbfs", threshold_dbfs)),
        )

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        offset = 0  # audio time at the start of the current frame
        voiced_run = 0  # consecutive voiced audio before speech is confirmed
        pending: list[AudioFrame] = []
        in_speech = False
        speech_end = 0
        silence = 0
        async for event in events:
            if not isinstance(event, AudioFrame):
                continue
            voiced = frame_dbfs(event.pcm) > self.threshold_dbfs
            frame_end = offset + event.duration_ms
            if not in_speech:
                pending = [*pending, event][-(self.min_speech_ms // event.duration_ms + 1) :]
                voiced_run = voiced_run + event.duration_ms if voiced else 0
                if voiced_run >= self.min_speech_ms:
                    in_speech = True
                    speech_end = frame_end
                    yield SpeechStart(offset_ms=frame_end - voiced_run)
                    for frame in pending:
                        yield frame
                    pending = []
            else:
                yield event
                if voiced:
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
