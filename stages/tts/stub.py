"""The stub TTS: real audio frames whose timing is data.

Audio duration follows the text (characters per second by script), the first
frame comes after a scripted delay, and each further frame after
``real_time_factor`` x its duration, so a factor below 1 synthesises faster than
playback, as a real engine must.
"""

from __future__ import annotations

import asyncio
import math
from array import array
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from pipeline.events import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE, AudioOut, Event, LatencyProfile, Sentence, StageInfo
from stages.registry import ConfigError, Implementation, TurnInputs

CJK_CHARS_PER_S = 4.5
LATIN_CHARS_PER_S = 14.0


def speech_duration_ms(text: str) -> int:
    """How long a voice takes to say ``text``, rounded up to whole frames."""
    cjk = sum(1 for ch in text if "\u3400" <= ch <= "\u9fff")
    latin = len(text) - cjk
    ms = 1000 * (cjk / CJK_CHARS_PER_S + latin / LATIN_CHARS_PER_S)
    return max(1, math.ceil(ms / FRAME_MS)) * FRAME_MS


def _tone_frame(freq_hz: float = 220.0, amplitude: int = 3000) -> bytes:
    samples = array(
        "h", (int(amplitude * math.sin(2 * math.pi * freq_hz * n / SAMPLE_RATE)) for n in range(FRAME_SAMPLES))
    )
    return samples.tobytes()


_TONE = _tone_frame()


class StubTts:
    """The TTS stage with scripted timing: a tone as long as the sentence would take to say, its first frame after
    a scripted delay, the rest at ``real_time_factor`` of their duration."""

    def __init__(self, first_frame: LatencyProfile, real_time_factor: float = 0.1) -> None:
        if not real_time_factor >= 0:
            raise ValueError(f"real_time_factor must be >= 0, got {real_time_factor}")
        self.first_frame = first_frame
        self.real_time_factor = real_time_factor
        self.info = StageInfo(
            role="tts", impl="stub", scripted=True, attributes=(("tts.real_time_factor", real_time_factor),)
        )

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if not isinstance(event, Sentence):
                continue
            frames = speech_duration_ms(event.text) // FRAME_MS
            await asyncio.sleep(next(self.first_frame.delays_s(event.index)))
            for seq in range(frames):
                if seq:
                    await asyncio.sleep(FRAME_MS * self.real_time_factor / 1000)
                yield AudioOut(sentence_index=event.index, seq=seq, pcm=_TONE)


@dataclass(frozen=True, slots=True)
class StubSettings:
    """The ``[tts]`` keys of ``impl = "stub"``: the first frame's latency and the real-time factor, as data."""

    first_frame: LatencyProfile = field(default_factory=lambda: LatencyProfile(first_ms=180, jitter_ms=30, seed=3))
    real_time_factor: float = 0.15

    def __post_init__(self) -> None:
        if self.real_time_factor < 0:
            raise ConfigError(f"[tts] real_time_factor = {self.real_time_factor}: must be >= 0")


def _build(s: StubSettings, _engine: None, turn: TurnInputs) -> StubTts:
    return StubTts(s.first_frame.salted(turn.salt), s.real_time_factor)


IMPLEMENTATION = Implementation("tts", "stub", StubSettings, _build, scripted=True)
