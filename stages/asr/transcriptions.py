"""ASR by an OpenAI-compatible speech service (``POST /v1/audio/transcriptions``), over HTTP.

What a xiaozhi server does with its ``OpenaiASR`` provider: the utterance the VAD passed
is written as a 16 kHz mono WAV and sent as a multipart upload once the end-point comes.
The lab's own server uses it to stand beside a real server on the same speech service, so
the two are compared on equal ASR (issue 24). A new connection per request, as the real
provider's ``requests.post`` opens one, and without the question's language, which the real
provider never sends either (the service's ASR detects it). The service is the lab's own, on
loopback, and is asked without a key.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import numpy as np
import soundfile

from pipeline.events import SAMPLE_RATE, Event, StageInfo, Transcript
from stages.asr.utterance import utterance
from stages.http import check_url, post, require_url
from stages.registry import Implementation, TurnInputs

SERVICE_LANGUAGES = ("zh", "en")


@dataclass(frozen=True, slots=True)
class ServiceAsrSettings:
    """The ``[asr]`` keys of ``impl = "service"``: where the speech service listens and which model to ask for."""

    url: str = ""  # the transcription endpoint: http://HOST:PORT/v1/audio/transcriptions
    model: str = "whisper-base"  # sent as the request's ``model``

    def __post_init__(self) -> None:
        check_url("asr", self.url)


def wav_bytes(pcm: bytes, rate: int = SAMPLE_RATE) -> bytes:
    """16-bit mono PCM as a WAV file's bytes."""
    out = io.BytesIO()
    soundfile.write(out, np.frombuffer(pcm, dtype="<i2"), rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


class ServiceAsr:
    """The ASR stage that uploads the utterance to the speech service at the end-point and passes on its text."""

    def __init__(self, settings: ServiceAsrSettings, language: str) -> None:
        require_url("asr", settings.url, "/v1/audio/transcriptions")
        self.settings, self.language = settings, language
        self.info = StageInfo("asr", "service", attributes=(("asr.model", settings.model), ("asr.url", settings.url)))

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        pcm = await utterance(events)
        if pcm is not None:
            text, language = await self._transcribe(pcm)
            yield Transcript(text=text, language=self.language or language)

    async def _transcribe(self, pcm: bytes) -> tuple[str, str]:
        form = aiohttp.FormData()
        form.add_field("file", wav_bytes(pcm), filename="utterance.wav", content_type="audio/wav")
        form.add_field("model", self.settings.model)
        form.add_field("response_format", "verbose_json")
        answer = json.loads(await post(self.settings.url, data=form))
        return str(answer.get("text", "")).strip(), str(answer.get("language", "") or self.language)


def _build(s: ServiceAsrSettings, _engine: object, turn: TurnInputs) -> ServiceAsr:
    return ServiceAsr(s, turn.language)


IMPLEMENTATION = Implementation(
    "asr", "service", ServiceAsrSettings, _build, languages=SERVICE_LANGUAGES, detects_language=True
)
