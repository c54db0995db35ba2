"""The ``service`` ASR and TTS stages against the lab's real speech services on loopback.

The services run on their own event loop in a thread, so a stage is driven exactly as a turn
drives it (``tests.harness.run_stage``, on the real clock). Behind the services: a scripted ASR that records the
audio it was handed and detects a language (as the real provider never sends one), the stub TTS
with no latency, and for the refusals the oracle ASR (which cannot detect a language). A tiny
server of fixed bytes stands in where the services cannot misbehave on cue.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import soundfile
from aiohttp import web

from pipeline.analysis.traces import ReadProblems, ReadSpan, read_trace_file
from pipeline.clock import RealClock, run_on_clock
from pipeline.endpoints.speech import SPEECH, TRANSCRIPTIONS, SpeechServices, SpeechStages
from pipeline.endpoints.speech.speech_stages import Role
from pipeline.events import (
    FRAME_BYTES,
    FRAME_SAMPLES,
    AudioFrame,
    AudioOut,
    Event,
    LatencyProfile,
    Sentence,
    SpeechEnd,
    SpeechStart,
    Stage,
    StageInfo,
    Transcript,
    TurnEnd,
)
from pipeline.settings.config import AsrConfig, ConfigError, TtsConfig, load_config
from pipeline.tracing import names
from pipeline.tracing.export import Tracing
from stages.asr.transcriptions import ServiceAsr, ServiceAsrSettings
from stages.catalog import registry
from stages.http import ServiceError
from stages.registry import Implementation, TurnInputs
from stages.tts.service import ServiceTts, ServiceTtsSettings
from stages.tts.stub import StubTts, speech_duration_ms
from tests.harness import run_stage, stage_run


def outputs(stage: Stage, events: Sequence[Event]) -> list[Event]:
    """What a stage yields, run on the real clock: its HTTP client's time limits must not fire early."""
    return run_stage(stage, events, RealClock()).events


SENTENCE = "Turn on the kitchen light."
NO_TURN = TurnInputs(text="", language="")
HI = Sentence(index=0, text="Hi.", call_index=0, first_token=0)


# --- the services, on a loop of their own ---------------------------------------------------------


class Heard:
    """What the services' ASR was handed, request by request: the PCM and the language asked for."""

    def __init__(self) -> None:
        self.calls: list[tuple[bytes, str]] = []


@dataclass(frozen=True, slots=True)
class NoSettings:
    pass


class HeardAsr:
    """Transcribes nothing: says how much audio it got and records it; "en" when no language is given."""

    info = StageInfo("asr", "heard", scripted=True)

    def __init__(self, heard: Heard, language: str) -> None:
        self.heard, self.language = heard, language

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        pcm = bytearray()
        async for event in events:
            if isinstance(event, AudioFrame):
                pcm += event.pcm
            elif isinstance(event, SpeechEnd):
                self.heard.calls.append((bytes(pcm), self.language))
                yield Transcript(text=f" heard {event.offset_ms} ms ", language=self.language or "en")
                return


def _build_heard(_s: NoSettings, engine: Heard, turn: TurnInputs) -> HeardAsr:
    return HeardAsr(engine, turn.language)


HEARD = Implementation("asr", "heard", NoSettings, _build_heard, languages=("zh", "en"), detects_language=True)


def stages(heard: Heard | None = None) -> SpeechStages:
    """The recording ASR (the oracle when ``heard`` is None) and the stub TTS, neither with latency."""
    asr = (
        Role(HEARD, NoSettings(), heard, "")
        if heard is not None
        else Role(registry().get("asr", "oracle"), AsrConfig("oracle").settings, None, "")
    )
    stub = registry().get("tts", "stub")
    tts_cfg = TtsConfig(impl="stub", first_frame=LatencyProfile(), real_time_factor=0.0)
    return SpeechStages(asr, Role(stub, stub.settings_from(tts_cfg), None, ""))


@contextlib.contextmanager
def serving(speech: SpeechStages, out: Path, **options: Any) -> Iterator[SpeechServices]:
    """The services on their own event loop in a thread, tracing to ``out``; stopped on leaving."""
    tracing = Tracing(out / "traces" / "speech.jsonl", "lab-speech-services")
    services = SpeechServices(speech, tracing, RealClock(), **options)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="speech-services", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(services.start(), loop).result(10)
        try:
            yield services
        finally:
            asyncio.run_coroutine_threadsafe(services.stop(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        tracing.shutdown()


def url(services: SpeechServices, route: str) -> str:
    return f"http://127.0.0.1:{services.port}{route}"


def spans(out: Path) -> list[ReadSpan]:
    problems = ReadProblems()
    found = list(read_trace_file(out / "traces" / "speech.jsonl", problems))
    assert not problems.messages
    return found


def speech_frames(count: int, seed: int = 7) -> list[AudioFrame]:
    """``count`` 60 ms frames of noise: every sample counts when the audio is compared."""
    rng = np.random.default_rng(seed)
    pcm = rng.integers(-8000, 8000, size=count * FRAME_SAMPLES, dtype=np.int16).astype("<i2").tobytes()
    return [AudioFrame(seq=i, pcm=pcm[i * FRAME_BYTES : (i + 1) * FRAME_BYTES]) for i in range(count)]


# --- ASR ------------------------------------------------------------------------------------------------


def test_asr_sends_the_utterance_as_a_wav_and_yields_the_transcript(tmp_path: Path) -> None:
    heard = Heard()
    frames = speech_frames(20)
    late = speech_frames(3, seed=8)  # after the end-point: not the utterance's
    events: list[Event] = [frames[0], SpeechStart(offset_ms=60), *frames[1:], SpeechEnd(offset_ms=1200), *late]
    with serving(stages(heard), tmp_path) as services:
        stage = ServiceAsr(ServiceAsrSettings(url=url(services, TRANSCRIPTIONS), model="whisper-1"), "")
        out = outputs(stage, events)

    assert out == [Transcript(text="heard 1200 ms", language="en")]  # the service's words, its language
    [(pcm, language)] = heard.calls
    # sample for sample, none after the end-point (the service's decode, through floats and * 32767 as a
    # fixture's is, may move a sample by one step)
    sent = np.frombuffer(b"".join(f.pcm for f in frames), dtype="<i2").astype(np.int32)
    got = np.frombuffer(pcm, dtype="<i2").astype(np.int32)
    assert len(got) == len(sent) and np.abs(got - sent).max() <= 1
    assert language == ""  # no language sent: the service's ASR detected it
    [span] = spans(tmp_path)
    assert span.name == names.ASR and span.status_code == 0
    assert span.attributes[names.SERVICE_INPUT_FORMAT] == "WAV PCM_16" and span.attributes[names.AUDIO_MS] == 1200
    assert span.attributes[names.SERVICE_MODEL] == "whisper-1"
    assert span.attributes[names.SERVICE_FORMAT] == "verbose_json"
    assert span.attributes[names.ASR_LANGUAGE] == "en"
    assert stage.info.attributes == (("asr.model", "whisper-1"), ("asr.url", url(services, TRANSCRIPTIONS)))


def test_asr_keeps_the_questions_language_and_asks_nothing_without_an_end_point(tmp_path: Path) -> None:
    heard = Heard()
    with serving(stages(heard), tmp_path) as services:
        stage_url = url(services, TRANSCRIPTIONS)
        told = outputs(ServiceAsr(ServiceAsrSettings(url=stage_url), "zh"), [*speech_frames(5), SpeechEnd(300)])
        cut_short = outputs(ServiceAsr(ServiceAsrSettings(url=stage_url), "zh"), speech_frames(5))

    assert told == [Transcript(text="heard 300 ms", language="zh")]
    assert [language for _, language in heard.calls] == [""]  # the service is still not told
    assert cut_short == []  # the input ended without an end-point: no request
    [span] = spans(tmp_path)
    assert span.attributes[names.AUDIO_MS] == 300 and span.attributes[names.SERVICE_MODEL] == "whisper-base"


# --- TTS ------------------------------------------------------------------------------------------------


def test_tts_speaks_each_sentence_as_60_ms_frames_of_the_services_audio(tmp_path: Path) -> None:
    second = "And the hall."
    events: list[Event] = [
        Sentence(index=3, text=SENTENCE, call_index=0, first_token=0),
        TurnEnd(),  # not a sentence: nothing to say
        Sentence(index=4, text=second, call_index=0, first_token=9),
    ]
    with serving(stages(), tmp_path) as services:
        stage = ServiceTts(ServiceTtsSettings(url=url(services, SPEECH), voice="alloy"))
        out = outputs(stage, events)
    # what the stub behind the services says, in-process
    expected = outputs(StubTts(LatencyProfile(), 0.0), events)

    assert all(isinstance(e, AudioOut) for e in out)
    frames = [e for e in out if isinstance(e, AudioOut)]
    counts = [speech_duration_ms(SENTENCE) // 60, speech_duration_ms(second) // 60]
    assert [(f.sentence_index, f.seq) for f in frames] == [(3, i) for i in range(counts[0])] + [
        (4, i) for i in range(counts[1])
    ]
    assert all(len(f.pcm) == FRAME_BYTES and f.duration_ms == 60 for f in frames)
    assert frames == expected  # the WAV at 16 kHz passes through decode, resampler and framer unchanged
    tts, tts_second = spans(tmp_path)
    assert tts.name == names.TTS and tts.status_code == 0
    assert (tts.attributes[names.SERVICE_VOICE], tts.attributes[names.SERVICE_MODEL]) == ("alloy", "tts-1")
    assert tts.attributes[names.SERVICE_FORMAT] == "wav" and tts.attributes[names.SENTENCE_TEXT] == SENTENCE
    assert tts.attributes[names.AUDIO_MS] == counts[0] * 60
    assert tts_second.attributes[names.SENTENCE_TEXT] == second


class FixedSpeech:
    """A speech endpoint whose answer is the given bytes, whatever is asked."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _speak(self, request: web.Request) -> web.Response:
        return web.Response(body=self.body, content_type="audio/wav")

    async def __aenter__(self) -> FixedSpeech:
        app = web.Application()
        app.router.add_post(SPEECH, self._speak)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}{SPEECH}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


def speak_with(body: bytes) -> list[Event]:
    clock = RealClock()

    async def run() -> list[Event]:
        async with FixedSpeech(body) as server:
            return (await stage_run(ServiceTts(ServiceTtsSettings(url=server.url)), [HI], clock)).events

    return run_on_clock(run(), clock)


def test_tts_resamples_another_rate_to_16_khz_frames() -> None:
    buf = io.BytesIO()
    tone = (3000 * np.sin(2 * np.pi * 440 * np.arange(22050) / 22050)).astype(np.int16)
    soundfile.write(buf, tone, 22050, format="WAV", subtype="PCM_16")
    frames = [e for e in speak_with(buf.getvalue()) if isinstance(e, AudioOut)]
    assert len(frames) == 17 and all(len(f.pcm) == FRAME_BYTES for f in frames)  # 1 s: 16 whole frames and a part
    samples = np.frombuffer(b"".join(f.pcm for f in frames), dtype="<i2")
    assert np.abs(samples[:16000]).max() > 2500 and not samples[16000:].any()  # the tone, then the last frame's pad


def test_tts_names_audio_it_cannot_read() -> None:
    with pytest.raises(ServiceError, match="answered audio soundfile cannot read"):
        speak_with(b"<html>no audio here</html>")


# --- refusals: ServiceError with the service's status and words ----------------------------------------


def test_a_refused_request_raises_service_error_naming_the_status(tmp_path: Path) -> None:
    blank = [Sentence(index=0, text="  ", call_index=0, first_token=0)]
    utterance: list[Event] = [*speech_frames(3), SpeechEnd(180)]
    with serving(stages(), tmp_path) as services:  # the oracle ASR: it cannot detect a language
        tts = ServiceTts(ServiceTtsSettings(url=url(services, SPEECH)))
        asr = ServiceAsr(ServiceAsrSettings(url=url(services, TRANSCRIPTIONS)), "en")
        with pytest.raises(ServiceError, match=r"audio/speech answered 400: .*empty_input") as empty:
            outputs(tts, blank)
        with pytest.raises(ServiceError, match=r"answered 400: .*cannot detect a language") as undetected:
            outputs(asr, utterance)
        still = outputs(tts, [HI])
    assert "'input' is empty" in str(empty.value) and "unsupported_language" in str(undetected.value)
    assert still and all(isinstance(e, AudioOut) for e in still)  # the stage and service go on
    codes = [s.attributes.get(names.ERROR_TYPE, "") for s in spans(tmp_path)]
    assert codes == ["empty_input", "unsupported_language", ""]


def test_a_service_with_a_key_refuses_the_stages_401(tmp_path: Path) -> None:
    with serving(stages(Heard()), tmp_path, api_key="sk-speech-2b4e") as services:
        asr = ServiceAsr(ServiceAsrSettings(url=url(services, TRANSCRIPTIONS)), "")
        tts = ServiceTts(ServiceTtsSettings(url=url(services, SPEECH)))
        with pytest.raises(ServiceError, match=r"transcriptions answered 401: .*invalid_api_key"):
            outputs(asr, [*speech_frames(2), SpeechEnd(120)])
        with pytest.raises(ServiceError, match=r"speech answered 401: .*invalid_api_key"):
            outputs(tts, [HI])
    assert [s.attributes[names.HTTP_STATUS] for s in spans(tmp_path)] == [401, 401]


def test_a_service_that_is_not_there_is_a_client_error(tmp_path: Path) -> None:
    with serving(stages(), tmp_path) as services:
        gone = url(services, SPEECH)
    with pytest.raises(aiohttp.ClientConnectionError):
        outputs(ServiceTts(ServiceTtsSettings(url=gone)), [HI])


# --- settings: from the configuration to the stage ----------------------------------------------------


def test_a_missing_url_is_refused_at_build() -> None:
    with pytest.raises(ValueError, match=r"\[asr\] impl = 'service' needs url = http://"):
        registry().get("asr", "service").build(ServiceAsrSettings(), None, NO_TURN)
    with pytest.raises(ValueError, match=r"\[tts\] impl = 'service' needs url = http://"):
        registry().get("tts", "service").build(ServiceTtsSettings(), None, NO_TURN)


@pytest.mark.parametrize("bad", ["127.0.0.1:8000/v1/audio/speech", "ftp://127.0.0.1/v1/audio/speech"])
def test_a_non_http_url_is_refused_with_the_settings_naming_the_key(bad: str) -> None:
    for role in ("asr", "tts"):
        with pytest.raises(ConfigError, match=rf"\[{role}\] url = '{re.escape(bad)}': an http:// or https://"):
            load_config(None, {role: {"impl": "service", "url": bad}})


def test_the_configured_settings_reach_the_stages_and_the_service(tmp_path: Path) -> None:
    heard = Heard()
    with serving(stages(heard), tmp_path) as services:
        config = tmp_path / "service.toml"
        config.write_text(
            f'[asr]\nimpl = "service"\nurl = "{url(services, TRANSCRIPTIONS)}"\nmodel = "whisper-large-v3"\n\n'
            f'[tts]\nimpl = "service"\nurl = "{url(services, SPEECH)}"\nvoice = "nova"\n'
        )
        cfg = load_config(config)
        built = []
        for role, section in (("asr", cfg.asr), ("tts", cfg.tts)):
            impl = registry().get(role, "service")
            built.append(impl.build(impl.settings_from(section), None, NO_TURN))
        asr, tts = built
        assert isinstance(asr, ServiceAsr) and isinstance(tts, ServiceTts)
        assert asr.settings == ServiceAsrSettings(url=url(services, TRANSCRIPTIONS), model="whisper-large-v3")
        assert tts.settings == ServiceTtsSettings(url=url(services, SPEECH), voice="nova")
        assert registry().get("asr", "service").detects_language
        heard_text = outputs(asr, [*speech_frames(4), SpeechEnd(240)])
        spoken = outputs(tts, [HI])

    assert heard_text == [Transcript(text="heard 240 ms", language="en")] and spoken
    asr_span, tts_span = spans(tmp_path)
    assert asr_span.attributes[names.SERVICE_MODEL] == "whisper-large-v3"
    assert tts_span.attributes[names.SERVICE_VOICE] == "nova"
