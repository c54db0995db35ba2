"""Loads the models a configuration names (once per run) and builds each turn's stages.

Everything that can fail on bad input (a missing or corrupt model, a base model
instead of a chat model, a language a stage cannot handle) fails here, before
the first turn, with a message naming the file or the questions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.cloud_emulator import get_compute_profile, serve_endpoint
from pipeline.config import Config, Latency
from pipeline.events import Stage
from pipeline.fixtures import Question
from pipeline.llama_server import LlamaServer
from pipeline.models import REGISTRY, resolve
from pipeline.netem import get_profile
from pipeline.turn import ServerStages
from stages.asr_funasr import FUNASR_LANGUAGES, FunAsr, FunAsrEngine
from stages.asr_oracle import OracleAsr
from stages.asr_whisper import WHISPER_LANGUAGES, WhisperAsr, WhisperEngine
from stages.latency import LatencyProfile
from stages.llm import ChatBackend, LlmSettings, LlmStage, Message, ToolSpec
from stages.llm_llama import LlamaBackend, LlamaEngine, LlamaSettings, check_chat_model
from stages.llm_openai import OpenAIChatBackend, OpenAISettings
from stages.llm_scripted import ScriptedBackend, ScriptedReply, ScriptedTools
from stages.sentences import SentenceSplitter, SplitRules
from stages.tts_espeak import VOICES as ESPEAK_LANGUAGES
from stages.tts_espeak import EspeakTts
from stages.tts_piper import PIPER_LANGUAGES, PiperEngine, PiperTts
from stages.tts_stub import StubTts
from stages.vad import EnergyClassifier, FrameClassifier, FrameVad
from stages.vad_fsmn import FsmnVad, FsmnVadModel
from stages.vad_silero import SileroClassifier, SileroModel

DEVICE_TOOLS = (
    ToolSpec(
        name="set_light",
        description="Turn a light on or off.",
        parameters_json='{"type":"object","properties":{"room":{"type":"string"},"on":{"type":"boolean"}}}',
    ),
    ToolSpec(
        name="set_volume",
        description="Set the speaker volume from 0 to 100.",
        parameters_json='{"type":"object","properties":{"level":{"type":"integer"}}}',
    ),
)

SYSTEM_PROMPTS = {
    "zh": "你是一个语音助手。请用一到两句简短的中文口语回答，不要使用列表、表情或Markdown。",
    "en": "You are a voice assistant. Answer in one or two short spoken English sentences. No lists, no markdown.",
}


class SetupError(ValueError):
    """The configuration cannot run on these questions; nothing has started."""


@dataclass
class Engines:
    """Models loaded once per run, shared by every turn."""

    silero: SileroModel | None = None
    fsmn: FsmnVadModel | None = None
    whisper: WhisperEngine | None = None
    funasr: FunAsrEngine | None = None
    llama: LlamaEngine | None = None
    piper: PiperEngine | None = None
    llama_server: LlamaServer | None = None
    chat: ChatBackend | None = None  # the run's shared HTTP backend, opened by ``open_chat``
    endpoint: str = ""  # what every row says the LLM was: "in-process llama.cpp", "emulated cloud, ..."
    identity: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        if self.llama_server is not None:
            self.llama_server.stop()


def _identity(name: str, path: Path) -> str:
    """A model's identity for config_id: its registry name, or its file name and size."""
    if name in REGISTRY:
        return f"{name}@{REGISTRY[name].sha256[:12]}"
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size
    return f"{path.name}:{size}"


def load_engines(cfg: Config, cache: Path) -> Engines:
    """Every model the configuration names, loaded; on any failure nothing is left running."""
    engines = Engines()
    try:
        _load(cfg, cache, engines)
    except BaseException:
        engines.close()
        raise
    return engines


def _load(cfg: Config, cache: Path, engines: Engines) -> None:
    for load in (_load_vad, _load_asr, _load_llm, _load_tts):
        load(cfg, cache, engines)


def _load_vad(cfg: Config, cache: Path, engines: Engines) -> None:
    if cfg.vad.impl in ("silero", "fsmn"):
        path = resolve(cfg.vad.model, cache)
        if cfg.vad.impl == "silero":
            engines.silero = SileroModel(path)
        else:
            engines.fsmn = FsmnVadModel(path, cfg.vad.silence_ms)
        engines.identity["vad"] = _identity(cfg.vad.model, path)


def _load_asr(cfg: Config, cache: Path, engines: Engines) -> None:
    if cfg.asr.impl in ("whisper", "funasr"):
        path = resolve(cfg.asr.model, cache)
        if cfg.asr.impl == "whisper":
            engines.whisper = WhisperEngine(path, threads=cfg.asr.threads, beam_size=cfg.asr.beam_size)
        else:
            engines.funasr = FunAsrEngine(path)
        engines.identity["asr"] = _identity(cfg.asr.model, path)


def _load_llm(cfg: Config, cache: Path, engines: Engines) -> None:
    if cfg.llm.impl == "llama":
        path = resolve(cfg.llm.model, cache)
        settings = LlamaSettings(cfg.llm.n_ctx, cfg.llm.threads, cfg.llm.seed, cfg.llm.temperature)
        engines.llama = LlamaEngine(path, settings)
        engines.identity["llm"] = f"{_identity(cfg.llm.model, path)} {engines.llama.info.quantisation}"
        engines.endpoint = "in-process llama.cpp"
    elif cfg.llm.impl == "server":
        path = resolve(cfg.llm.model, cache)
        info = check_chat_model(path)
        engines.llama_server = LlamaServer(path, cfg.llm.threads, cfg.llm.n_ctx, cfg.llm.seed).start()
        engines.identity["llm"] = f"{_identity(cfg.llm.model, path)} {info.quantisation}"
        engines.endpoint = f"llama.cpp server (local process), {cfg.llm.model}"
    elif cfg.llm.impl == "openai":
        _cloud_identity(cfg, engines)
    else:
        engines.endpoint = "scripted"


def _load_tts(cfg: Config, cache: Path, engines: Engines) -> None:
    if cfg.tts.impl == "piper":
        path = resolve(cfg.tts.voice, cache)
        engines.piper = PiperEngine(path)
        engines.identity["tts"] = _identity(cfg.tts.voice, path)


def _cloud_identity(cfg: Config, engines: Engines) -> None:
    """Name the endpoint and the network in config_id; unknown profile names fail here, before the run."""
    try:
        network = get_profile(cfg.network.profile).as_dict() if cfg.network.profile != "none" else {}
        compute = get_compute_profile(cfg.cloud.emulator) if cfg.cloud.emulator else None
    except ValueError as exc:
        raise SetupError(str(exc)) from None
    engines.identity["network"] = json.dumps(network, sort_keys=True)
    if compute is not None:
        engines.identity["llm"] = json.dumps(dataclasses.asdict(compute), sort_keys=True)
        engines.endpoint = f"emulated cloud, profile {compute.name}"
    else:
        engines.identity["llm"] = f"{cfg.cloud.base_url} {cfg.llm.model}"
        engines.endpoint = f"cloud {cfg.cloud.base_url}"
    if cfg.network.profile != "none":
        engines.endpoint += f"; network {cfg.network.profile}"


def openai_settings(cfg: Config, base_url: str) -> OpenAISettings:
    return OpenAISettings(
        base_url=base_url,
        model=cfg.llm.model,
        api_key_env=cfg.cloud.api_key_env,
        connect_timeout_s=cfg.cloud.connect_timeout_s,
        read_timeout_s=cfg.cloud.read_timeout_s,
        retries=cfg.cloud.retries,
        retry_backoff_ms=cfg.cloud.retry_backoff_ms,
        temperature=cfg.llm.temperature,
        seed=cfg.llm.seed,
        stream_usage=cfg.cloud.stream_usage,
        sentence_stops=tuple(s for s in cfg.cloud.sentence_stops.split("|") if s),
        continuation=cfg.cloud.continuation,  # type: ignore[arg-type]
        keepalive_s=cfg.cloud.keepalive_s,
    )


def llama_server_settings(cfg: Config, base_url: str) -> OpenAISettings:
    """llama-server drops idle kept-alive connections between streamed answers (seen here as
    ServerDisconnected on the next call), so each call opens its own: on loopback that costs
    well under a millisecond."""
    return dataclasses.replace(openai_settings(cfg, base_url), keepalive_s=0.0)


@contextlib.asynccontextmanager
async def open_chat(
    cfg: Config, engines: Engines, api_key: str | None, answers: Mapping[str, str]
) -> AsyncIterator[None]:
    """For the run's duration: the HTTP backend of a cloud or llama.cpp-server LLM, shared by every turn."""
    if cfg.llm.impl == "server":
        assert engines.llama_server is not None
        async with OpenAIChatBackend(llama_server_settings(cfg, engines.llama_server.base_url)) as backend:
            engines.chat = backend
            yield
    elif cfg.llm.impl == "openai":
        given = answers if cfg.cloud.emulator_answers else None
        async with serve_endpoint(cfg.cloud.base_url, cfg.cloud.emulator, cfg.network.profile, given) as endpoint:
            settings = openai_settings(cfg, endpoint.base_url)
            async with OpenAIChatBackend(settings, api_key, connect_to=endpoint.connect_to) as backend:
                engines.chat = backend
                yield
    else:
        yield
    engines.chat = None


def check_languages(cfg: Config, questions: Sequence[Question]) -> None:
    """Refuse, before the run, questions in a language a configured stage cannot handle."""
    limits = {
        "[asr] impl = 'whisper'": WHISPER_LANGUAGES if cfg.asr.impl == "whisper" else None,
        "[asr] impl = 'funasr'": FUNASR_LANGUAGES if cfg.asr.impl == "funasr" else None,
        "[tts] impl = 'espeak'": tuple(ESPEAK_LANGUAGES) if cfg.tts.impl == "espeak" else None,
        "[tts] impl = 'piper'": PIPER_LANGUAGES if cfg.tts.impl == "piper" else None,
        "[llm] impl = 'llama'": tuple(SYSTEM_PROMPTS) if cfg.llm.impl != "scripted" else None,
    }
    for stage, allowed in limits.items():
        if allowed is None:
            continue
        bad = [q for q in questions if q.language not in allowed]
        if bad:
            ids = ", ".join(f"{q.id} ({q.language})" for q in bad[:8])
            raise SetupError(f"{stage} supports {', '.join(allowed)}; unsupported language in: {ids}")


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


def _classifier(cfg: Config, engines: Engines) -> FrameClassifier:
    if cfg.vad.impl == "silero":
        assert engines.silero is not None
        return SileroClassifier(engines.silero)
    return EnergyClassifier(cfg.vad.threshold_dbfs)


def _asr(cfg: Config, engines: Engines, question: Question, salt: int) -> Stage:
    if cfg.asr.impl == "whisper":
        assert engines.whisper is not None
        return WhisperAsr(engines.whisper, question.language)
    if cfg.asr.impl == "funasr":
        assert engines.funasr is not None
        return FunAsr(engines.funasr, question.language)
    return OracleAsr(question.text, question.language, profile(cfg.asr.latency, salt))


def _llm(cfg: Config, engines: Engines, question: Question, salt: int, history: tuple[Message, ...]) -> Stage:
    backend: ChatBackend
    if cfg.llm.impl == "llama":
        assert engines.llama is not None
        backend = LlamaBackend(engines.llama, cfg.llm.model)
    elif cfg.llm.impl in ("openai", "server"):
        assert engines.chat is not None, "open_chat() must surround the run"
        backend = engines.chat
    else:
        backend = ScriptedBackend(
            scripted_reply(question), profile(cfg.llm.latency, salt), model=cfg.llm.model, salt=salt
        )
    settings = LlmSettings(
        mode=cfg.llm.mode,  # type: ignore[arg-type]
        max_tokens=cfg.llm.max_tokens,
        max_calls=cfg.llm.max_calls,
        system_prompt=SYSTEM_PROMPTS.get(question.language[:2], SYSTEM_PROMPTS["en"]),
    )
    tools = DEVICE_TOOLS if cfg.llm.tools else ()
    executor = ScriptedTools(profile(cfg.llm.tool_latency, salt)) if tools else None
    scripted = cfg.llm.impl == "scripted" or (cfg.llm.impl == "openai" and bool(cfg.cloud.emulator))
    return LlmStage(backend, settings, tools, executor, impl=cfg.llm.impl, scripted=scripted, history=history)


def _tts(cfg: Config, engines: Engines, salt: int) -> Stage:
    if cfg.tts.impl == "espeak":
        return EspeakTts(cfg.tts.words_per_minute)
    if cfg.tts.impl == "piper":
        assert engines.piper is not None
        return PiperTts(engines.piper)
    return StubTts(profile(cfg.tts.first_frame, salt), cfg.tts.real_time_factor)


def _vad(cfg: Config, engines: Engines) -> Stage:
    if cfg.vad.impl == "fsmn":
        assert engines.fsmn is not None
        return FsmnVad(engines.fsmn)
    return FrameVad(_classifier(cfg, engines), cfg.vad.silence_ms, cfg.vad.min_speech_ms, cfg.vad.threshold)


def build_stages(
    cfg: Config, engines: Engines, question: Question, salt: int, history: tuple[Message, ...] = ()
) -> ServerStages:
    return ServerStages(
        vad=_vad(cfg, engines),
        asr=_asr(cfg, engines, question, salt),
        llm=_llm(cfg, engines, question, salt, history),
        sentences=SentenceSplitter(SplitRules(**dataclasses.asdict(cfg.sentences))),
        tts=_tts(cfg, engines, salt),
    )
