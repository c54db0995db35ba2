"""Builds the stages of one turn from the configuration and the question being asked."""

from __future__ import annotations

import dataclasses

from pipeline.config import Config, Latency
from pipeline.fixtures import Question
from pipeline.turn import ServerStages
from stages.asr_scripted import ScriptedAsr
from stages.latency import LatencyProfile
from stages.llm import LlmSettings, LlmStage, ToolSpec
from stages.llm_scripted import ScriptedBackend, ScriptedReply, ScriptedTools
from stages.sentences import SentenceSplitter, SplitRules
from stages.tts_stub import StubTts
from stages.vad_energy import EnergyVad

DEVICE_TOOLS = (
    ToolSpec(
        name="set_light",
        description="Turn a light on or off, or set its brightness.",
        parameters_json='{"type":"object","properties":{"room":{"type":"string"},"on":{"type":"boolean"}}}',
    ),
    ToolSpec(
        name="set_volume",
        description="Set the speaker volume from 0 to 100.",
        parameters_json='{"type":"object","properties":{"level":{"type":"integer"}}}',
    ),
)


def profile(lat: Latency, salt: int = 0) -> LatencyProfile:
    """A stage latency profile whose jitter differs per turn but repeats per run."""
    return LatencyProfile(lat.first_ms, lat.per_item_ms, lat.jitter_ms, lat.seed * 7919 + salt)


def scripted_reply(question: Question) -> ScriptedReply:
    text = question.answer or default_answer(question)
    return ScriptedReply(text=text, tool_name=question.tool, tool_arguments=question.tool_arguments)


def default_answer(question: Question) -> str:
    if question.language.startswith("zh"):
        return f"好的，你问的是：{question.text}这是一个简短的回答。希望对你有帮助！"
    return f"Sure, you asked: {question.text} Here is a short answer. I hope that helps!"


def build_stages(cfg: Config, question: Question, salt: int) -> ServerStages:
    llm_settings = LlmSettings(mode=cfg.llm.mode, max_tokens=cfg.llm.max_tokens, max_calls=cfg.llm.max_calls)  # type: ignore[arg-type]
    backend = ScriptedBackend(scripted_reply(question), profile(cfg.llm.latency, salt), model=cfg.llm.model, salt=salt)
    tools = DEVICE_TOOLS if cfg.llm.tools else ()
    executor = ScriptedTools(profile(cfg.llm.tool_latency, salt)) if tools else None
    return ServerStages(
        vad=EnergyVad(cfg.vad.threshold_dbfs, cfg.vad.silence_ms, cfg.vad.min_speech_ms),
        asr=ScriptedAsr(question.text, question.language, profile(cfg.asr.latency, salt)),
        llm=LlmStage(backend, llm_settings, tools=tools, executor=executor),
        sentences=SentenceSplitter(SplitRules(**dataclasses.asdict(cfg.sentences))),
        tts=StubTts(profile(cfg.tts.first_frame, salt), cfg.tts.real_time_factor),
    )
