"""TTS by an OpenAI-compatible speech service (``POST /v1/audio/speech``), over HTTP.

What a xiaozhi server does with its ``openai`` TTS provider: one request per sentence,
a WAV back. The lab's own server uses it to stand beside a real server on the same
speech service (issue 24). The WAV is decoded, resampled to the downlink's 16 kHz and
cut into 60 ms frames, all sent on once the whole answer has arrived (the service, like
the real provider, answers with a whole file).
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np
import soundfile

from pipeline.events import Event, Sentence, StageInfo
from stages.http import ServiceError, check_url, post, require_url
from stages.registry import Implementation, TurnInputs
from stages.tts.frames import frames_of


@dataclass(frozen=True, slots=True)
class ServiceTtsSettings:
    """The ``[tts]`` keys of ``impl = "service"``: where the speech service listens and which voice to ask for."""

    url: str = ""  # the speech endpoint: http://HOST:PORT/v1/audio/speech
    voice: str = "piper-joe"  # sent as the request's ``voice``

    def __post_init__(self) -> None:
        check_url("tts", self.url)


class ServiceTts:
    """The TTS stage that asks the speech service for each sentence's WAV and sends it on in 60 ms frames."""

    def __init__(self, settings: ServiceTtsSettings) -> None:
        require_url("tts", settings.url, "/v1/audio/speech")
        self.settings = settings
        self.info = StageInfo("tts", "service", attributes=(("tts.voice", settings.voice), ("tts.url", settings.url)))

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if not isinstance(event, Sentence):
                continue
            samples, rate = await self._speak(event.text)
            async for frame in frames_of([samples], rate, event.index):
                yield frame

    async def _speak(self, text: str) -> tuple[np.ndarray, int]:
        request = {"model": "tts-1", "input": text, "voice": self.settings.voice, "response_format": "wav"}
        body = await post(self.settings.url, json=request)
        try:
            samples, rate = soundfile.read(io.BytesIO(body), dtype="int16", always_2d=True)
        except (soundfile.LibsndfileError, RuntimeError) as exc:
            raise ServiceError(f"{self.settings.url} answered audio soundfile cannot read: {exc}") from None
        return samples[:, 0], int(rate)


def _build(s: ServiceTtsSettings, _engine: object, _turn: TurnInputs) -> ServiceTts:
    return ServiceTts(s)


IMPLEMENTATION = Implementation("tts", "service", ServiceTtsSettings, _build)
