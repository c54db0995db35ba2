"""The speech services' oracle ASR finds the fixture question from the audio alone (``heard.py``).

A real xiaozhi server sends the services only what its VAD cut: the clip after Opus at the
firmware's settings, with its pre-roll and the device's noise floor around it, sometimes only a
part of it. Each must be heard as its own question; noise as no words.
"""

from __future__ import annotations

import asyncio
import io
import math
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import soundfile

from pipeline.clock import RealClock
from pipeline.endpoints.speech import TRANSCRIPTIONS, SpeechServices
from pipeline.endpoints.speech.question_match import FixtureEars
from pipeline.settings.audio import load_audio
from pipeline.settings.fixtures import load_questions
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from pipeline.transport.wire.opus import OpusDecoder, OpusEncoder
from tests.endpoints.speech.test_relay import scripted_stages
from tests.endpoints.speech.test_speech_stages import spans
from tests.paths import REPO_ROOT

FIXTURES = REPO_ROOT / "audio_fixtures"
RATE = 16000


@pytest.fixture(scope="module")
def ears() -> FixtureEars:
    return FixtureEars.load(FIXTURES)


def noise_floor(seconds: float, seed: int = 3) -> bytes:
    """About -60 dBFS of noise, as the emulated device's microphone streams between questions."""
    rng = np.random.default_rng(seed)
    return rng.normal(0, 32768 * 10 ** (-60 / 20), int(seconds * RATE)).astype("<i2").tobytes()


def through_opus(path: Path) -> bytes:
    """The clip as the real server decodes it: each 60 ms frame through the firmware's encoder and back."""
    encoder, decoder = OpusEncoder("firmware"), OpusDecoder()
    return b"".join(decoder.decode(encoder.encode(frame.pcm)) for frame in load_audio(path).frames)


def test_every_clip_is_heard_as_its_question_whole_cut_at_the_head_or_halved(ears: FixtureEars) -> None:
    for question in load_questions(FIXTURES).questions:
        pcm = through_opus(question.audio)
        for upload in (noise_floor(0.6) + pcm + noise_floor(1.0), pcm[2 * RATE :], pcm[: len(pcm) // 2]):
            heard = ears.hear(upload)
            assert heard is not None and heard.question_id == question.id, (question.id, heard)
            assert heard.text == question.text and heard.language == question.language


def test_the_noise_floor_and_silence_are_heard_as_no_question(ears: FixtureEars) -> None:
    assert ears.hear(noise_floor(3.0)) is None
    assert ears.hear(bytes(3 * RATE * 2)) is None
    assert ears.hear(b"") is None


def test_no_clips_is_refused() -> None:
    with pytest.raises(ValueError, match="no fixture clips"):
        FixtureEars({})


def wav(pcm: bytes) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, np.frombuffer(pcm, dtype="<i2"), RATE, format="WAV", subtype="PCM_16")
    return out.getvalue()


async def transcribe(services: SpeechServices, audio: bytes) -> dict[str, str]:
    form = aiohttp.FormData()
    form.add_field("file", audio, filename="utterance.wav", content_type="audio/wav")
    form.add_field("model", "whisper-1")  # what the real server's OpenaiASR names; no language
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{services.port}{TRANSCRIPTIONS}", data=form) as response,
    ):
        assert response.status == 200
        answer: dict[str, str] = await response.json()
        return answer


def test_the_services_oracle_answers_an_upload_with_its_fixture_text(tmp_path: Path, ears: FixtureEars) -> None:
    question = load_questions(FIXTURES).questions[2]
    tracing = Tracing(tmp_path / "traces" / "speech.jsonl", "lab-speech-services")

    async def both() -> tuple[dict[str, str], dict[str, str]]:
        async with SpeechServices(scripted_stages(), tracing, RealClock(), ears=ears) as services:
            clip = await transcribe(services, wav(noise_floor(0.5) + through_opus(question.audio)))
            noise = await transcribe(services, wav(noise_floor(2.0)))
            return clip, noise

    try:
        clip, noise = asyncio.run(both())
    finally:
        tracing.shutdown()
    assert clip == {"text": question.text}
    assert noise == {"text": ""}
    asr = [s for s in spans(tmp_path) if s.name == names.ASR]
    assert [s.attributes[names.HEARD_QUESTION] for s in asr] == [question.id, ""]
    assert [s.attributes[names.ASR_LANGUAGE] for s in asr] == [question.language, "und"]


class Work:
    """The arithmetic numpy is asked for, counted as each primitive costs it: a direct correlation one multiply
    per pair of samples, an FFT n log2 n per column."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ops = 0.0
        for module, name in ((np, "correlate"), (np.fft, "rfft"), (np.fft, "irfft")):
            monkeypatch.setattr(module, name, self._counted(getattr(module, name), name))

    def _counted(self, real: Any, name: str) -> Any:
        def call(a: np.ndarray, *args: Any, **kwargs: Any) -> Any:
            if name == "correlate":
                self.ops += len(a) * len(args[0])
            else:
                axis = kwargs.get("axis", -1)
                n = (args[0] if args else kwargs.get("n")) or a.shape[axis]
                self.ops += n * math.log2(max(n, 2)) * a.size / a.shape[axis]
            return real(a, *args, **kwargs)

        return call


def test_hearing_an_upload_costs_in_proportion_to_its_length(
    ears: FixtureEars, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack: a long upload froze the matcher (0.84 s for 45 s of audio, 3.16 s for 90 s: a correlation at
    every offset, each the upload's length long). Twice the audio now costs about twice the work."""
    talk = b"".join(through_opus(q.audio) for q in load_questions(FIXTURES).questions)
    work = Work(monkeypatch)
    ops = []
    for seconds in (45, 90, 180):
        work.ops = 0.0
        ears.hear((talk * 3)[: seconds * RATE * 2])
        ops.append(work.ops)
    assert ops[1] / ops[0] < 2.5 and ops[2] / ops[0] < 5.0, ops  # a quadratic matcher's: about 4 and 16
