"""Each real stage on the real packaged models and the real fixtures."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pipeline.analysis.textmetrics import error_rate
from pipeline.clock import RealClock
from pipeline.events import (
    AudioOut,
    CallEnd,
    CallStart,
    Event,
    LatencyProfile,
    Sentence,
    SpeechEnd,
    SpeechStart,
    Stage,
    TokenDelta,
    ToolCall,
    Transcript,
)
from pipeline.settings.audio import load_audio
from pipeline.settings.models import resolve
from stages.asr.funasr import FunAsrEngine
from stages.asr.whisper import WhisperAsr
from stages.llm import LlmSettings, LlmStage
from stages.llm.llama import LlamaBackend
from stages.llm.prompts import DEVICE_TOOLS, SYSTEM_PROMPTS, ScriptedTools
from stages.tts.espeak import EspeakTts
from stages.tts.piper import PiperTts
from stages.vad.endpointer import FrameVad
from stages.vad.energy import EnergyClassifier
from stages.vad.fsmn import FsmnVad
from stages.vad.silero import SileroClassifier
from tests import real_models as models
from tests.harness import run_stage

pytestmark = pytest.mark.real


def outputs(stage: Stage, events: Sequence[Event]) -> list[Event]:
    """What a real stage yields, run on the real clock: its model works in real time."""
    return run_stage(stage, events, RealClock()).events


def frames(name: str) -> list[Event]:
    return list(load_audio(models.FIXTURES / name).frames)


def boundaries(vad: FrameVad | FsmnVad, name: str) -> list[Event]:
    return [e for e in outputs(vad, frames(name)) if isinstance(e, (SpeechStart, SpeechEnd))]


def test_silero_finds_the_question_inside_its_silence() -> None:
    # fixtures have 0.5 s of silence before the speech and 1.2 s after it
    start, end = boundaries(FrameVad(SileroClassifier(models.silero())), "en01.wav")
    duration = load_audio(models.FIXTURES / "en01.wav").duration_ms
    assert isinstance(start, SpeechStart) and isinstance(end, SpeechEnd)
    assert 400 <= start.offset_ms <= 800
    assert duration - 1400 <= end.offset_ms <= duration - 1000


def test_silero_ignores_silence_and_noise_where_an_energy_vad_does_not() -> None:
    silero = FrameVad(SileroClassifier(models.silero()))
    assert boundaries(silero, "edge/silence.wav") == []
    assert boundaries(silero, "edge/noise.wav") == []
    assert boundaries(FrameVad(EnergyClassifier(-45)), "edge/noise.wav") != []  # why silero is the default


def test_silero_ends_the_turn_after_the_first_of_two_utterances() -> None:
    _start, end = boundaries(FrameVad(SileroClassifier(models.silero())), "edge/two_utterances.wav")
    assert isinstance(end, SpeechEnd) and end.offset_ms < 2600  # the second question starts after 1.5 s of pause


@pytest.mark.parametrize("qid", ["en01", "en02", "en04", "en08", "en12"])
def test_whisper_recognises_the_english_fixtures(qid: str) -> None:
    texts = {
        "en01": "Turn on the kitchen light.",
        "en02": "Set the volume to thirty.",
        "en04": "Will it rain tomorrow?",
        "en08": "What is the capital of France?",
        "en12": "How many days are in a week?",
    }
    events = [*frames(f"{qid}.wav"), SpeechEnd(offset_ms=0)]
    [transcript] = outputs(WhisperAsr(models.whisper(), "en"), events)
    assert isinstance(transcript, Transcript)
    scored = error_rate(texts[qid], transcript.text, "en")
    assert scored is not None and scored[0] <= 0.25, transcript.text  # at most one word in four wrong


def test_whisper_transcribes_chinese_and_the_error_rate_is_measured() -> None:
    [transcript] = outputs(WhisperAsr(models.whisper(), "zh"), [*frames("zh04.wav"), SpeechEnd(offset_ms=0)])
    assert isinstance(transcript, Transcript) and transcript.language == "zh"
    scored = error_rate("明天会下雨吗？", transcript.text, "zh")
    assert scored is not None and scored[1] == "cer"


def test_whisper_refuses_an_unsupported_language() -> None:
    with pytest.raises(ValueError, match="supports zh, en, not 'fr'"):
        WhisperAsr(models.whisper(), "fr")


def answer(
    engine_name: str, question: str, language: str = "en", mode: str = "single", tools: bool = False
) -> list[Event]:
    stage = LlmStage(
        LlamaBackend(models.llama(engine_name), engine_name),
        LlmSettings(mode=mode, max_tokens=64, system_prompt=SYSTEM_PROMPTS[language]),  # type: ignore[arg-type]
        tools=DEVICE_TOOLS if tools else (),
        executor=ScriptedTools(LatencyProfile()) if tools else None,
        impl="llama",
        scripted=False,
    )
    return outputs(stage, [Transcript(question, language)])


def text_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TokenDelta))


@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_local_llm_answers_a_knowledge_question(name: str) -> None:
    events = answer(name, "What is the capital of France?")
    assert "paris" in text_of(events).lower()
    [end] = [e for e in events if isinstance(e, CallEnd)]
    assert end.output_tokens > 0 and dict(end.server_timings)["prompt_ms"] > 0


def test_the_small_model_loads_and_speaks() -> None:
    assert text_of(answer("smollm2-135m", "Say hello.")).strip()


def test_local_llm_answers_in_chinese() -> None:
    assert any(
        "\u4e00" <= ch <= "\u9fff" for ch in text_of(answer("qwen2.5-coder-0.5b", "北京是哪个国家的首都？", "zh"))
    )


def test_local_llm_calls_a_device_tool_then_answers() -> None:
    events = answer("qwen2.5-coder-0.5b", "Turn on the kitchen light.", tools=True)
    [tool] = [e for e in events if isinstance(e, ToolCall)]
    assert tool.name == "set_light"
    assert len([e for e in events if isinstance(e, CallStart)]) == 2


def test_per_sentence_mode_stops_each_call_at_a_sentence_end() -> None:
    events = answer("qwen2.5-coder-0.5b", "Tell me two facts about the moon, in two sentences.", mode="per-sentence")
    calls = [e for e in events if isinstance(e, CallStart)]
    assert len(calls) >= 2
    per_call: dict[int, str] = {}
    call = 0
    for e in events:
        if isinstance(e, CallStart):
            call = e.index
        elif isinstance(e, TokenDelta):
            per_call[call] = per_call.get(call, "") + e.text
    for index in list(per_call)[:-1]:
        assert per_call[index].rstrip()[-1] in ".!?;。！？；", per_call[index]


def test_espeak_speaks_chinese_and_english_in_real_frames() -> None:
    out = outputs(
        EspeakTts(), [Sentence(0, "你好，今天天气很好。", 0, 0), Sentence(1, "Hello there, how are you?", 0, 0)]
    )
    audio = [e for e in out if isinstance(e, AudioOut)]
    per_sentence = {i: sum(e.duration_ms for e in audio if e.sentence_index == i) for i in (0, 1)}
    assert per_sentence[0] >= 1000 and per_sentence[1] >= 1000
    assert all(len(e.pcm) == 1920 for e in audio)
    assert any(any(e.pcm) for e in audio)  # not silence


def test_piper_speaks_english_and_refuses_chinese() -> None:
    out = outputs(PiperTts(models.piper()), [Sentence(0, "The kitchen light is on.", 0, 0)])
    assert sum(e.duration_ms for e in out if isinstance(e, AudioOut)) >= 800
    with pytest.raises(ValueError, match="cannot speak Chinese"):
        outputs(PiperTts(models.piper()), [Sentence(0, "你好。", 0, 0)])


def test_fsmn_vad_end_points_the_question() -> None:
    vad = FsmnVad(models.fsmn())
    start, end = boundaries(vad, "en01.wav")
    duration = load_audio(models.FIXTURES / "en01.wav").duration_ms
    assert isinstance(start, SpeechStart) and isinstance(end, SpeechEnd)
    assert start.offset_ms <= 800 and duration - 1600 <= end.offset_ms <= duration - 1000
    assert boundaries(vad, "edge/silence.wav") == []


def test_funasr_asr_loads_through_automodel_and_refuses_a_vad_folder() -> None:
    with pytest.raises(ValueError, match="a FsmnVADStreaming model, not a FunASR speech recognition model"):
        FunAsrEngine(resolve("fsmn-vad", models.CACHE))
    with pytest.raises(ValueError, match="not a FunASR model folder"):
        FunAsrEngine(models.FIXTURES)
