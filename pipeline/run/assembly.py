"""Loads what a configuration names (once per run) and builds each turn's stages, from the registry.

Every implementation is looked up in ``stages.catalog`` by its ``[role] impl`` name;
nothing here names one. Everything that can fail on bad input (a missing or corrupt
model, a base model instead of a chat model, a language a stage cannot handle) fails
here, before the first turn, with a message naming the file or the questions.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.events import Stage
from pipeline.fleet.scheduled import ScheduledBackend
from pipeline.fleet.scheduler import INTERACTIVE, Scheduler
from pipeline.run.endpoints import ENDPOINTS, LlmEndpoint, SetupError
from pipeline.run.turn import ServerStages
from pipeline.settings.config import Config
from pipeline.settings.fixtures import AUTO, Question
from pipeline.settings.models import CacheModels
from stages.catalog import registry
from stages.llm import (
    DEVICE_TOOLS,
    SYSTEM_PROMPTS,
    ChatBackend,
    LlmSettings,
    LlmStage,
    Message,
    ScriptedTools,
    ToolSource,
    system_prompt,
)
from stages.registry import ROLES, Implementation, Loaded, TurnInputs
from stages.sentences import SentenceSplitter, SplitRules

__all__ = [
    "Engines",
    "SetupError",
    "build_stages",
    "build_vad",
    "chat_backend",
    "check_languages",
    "load_engines",
    "open_chat",
]


def implementation(cfg: Config, role: str) -> Implementation:
    """The implementation ``[role] impl`` names."""
    return registry().get(role, getattr(cfg, role).impl)


@dataclass
class Engines:
    """What a run loads once and every turn shares: models, and the LLM's endpoint."""

    loaded: dict[str, Loaded] = field(default_factory=dict)
    llm_endpoint: LlmEndpoint | None = None
    chat: ChatBackend | None = None  # the endpoint's client, open while ``open_chat`` runs
    endpoint: str = ""  # what every row says the LLM was: "in-process llama.cpp", "emulated cloud, ..."
    identity: dict[str, str] = field(default_factory=dict)
    scheduler: Scheduler | None = None  # in front of the model every turn shares, when configured

    def engine(self, role: str) -> object:
        return self.loaded[role].engine if role in self.loaded else None

    def close(self) -> None:
        if self.llm_endpoint is not None:
            self.llm_endpoint.close()


def load_engines(
    cfg: Config, cache: Path, env: Mapping[str, str] | None = None, roles: Sequence[str] = ROLES
) -> Engines:
    """Every model the configuration names for ``roles``, loaded; on any failure nothing is left running.

    ``env`` is the environment a server process the run starts inherits (the entry point's)."""
    engines = Engines()
    models = CacheModels(cache)
    try:
        for role in roles:
            impl = implementation(cfg, role)
            if impl.load is not None:
                loaded = impl.load(impl.settings_from(getattr(cfg, role)), models)
                engines.loaded[role] = loaded
                if loaded.identity:
                    engines.identity[role] = loaded.identity
        llm = implementation(cfg, "llm")
        engines.endpoint = llm.label if "llm" in roles else ""
        if llm.endpoint and "llm" in roles:
            engines.llm_endpoint = ENDPOINTS[llm.endpoint](cfg, llm, engines.loaded.get("llm"), env or {})
            engines.identity.update(engines.llm_endpoint.identity)
            engines.endpoint = engines.llm_endpoint.label
    except BaseException:
        engines.close()
        raise
    return engines


@contextlib.asynccontextmanager
async def open_chat(
    cfg: Config, engines: Engines, api_key: str | None, answers: Mapping[str, str]
) -> AsyncIterator[None]:
    """For the run's duration: the client of the LLM's endpoint (if it has one), shared by every turn."""
    if engines.llm_endpoint is None:
        yield
        return
    async with engines.llm_endpoint.open(api_key, answers) as client:
        engines.chat = client
        try:
            yield
        finally:
            engines.chat = None


def check_languages(cfg: Config, questions: Sequence[Question]) -> None:
    """Refuse, before the run, questions in a language a configured stage cannot handle."""
    unknown = [q for q in questions if q.language == AUTO]
    asr = implementation(cfg, "asr")
    if unknown and not asr.detects_language:
        ids = ", ".join(q.id for q in unknown[:8])
        raise SetupError(f"[asr] impl = {asr.name!r} cannot tell a language; give --language for: {ids}")
    for role in ROLES:
        impl = implementation(cfg, role)
        if impl.languages is None:
            continue
        bad = [q for q in questions if q.language != AUTO and q.language not in impl.languages]
        if bad:
            ids = ", ".join(f"{q.id} ({q.language})" for q in bad[:8])
            raise SetupError(
                f"[{role}] impl = {impl.name!r} supports {', '.join(impl.languages)}; unsupported language in: {ids}"
            )


def turn_inputs(question: Question, salt: int) -> TurnInputs:
    return TurnInputs(question.text, question.language, question.answer, question.tool, question.tool_arguments, salt)


def _stage(cfg: Config, engines: Engines, role: str, turn: TurnInputs) -> Any:
    """The role's stage (for the LLM: its chat backend), as its implementation builds it."""
    impl = implementation(cfg, role)
    engine = engines.chat if impl.endpoint else engines.engine(role)
    if impl.endpoint and engine is None:
        raise RuntimeError("open_chat() must surround the run")
    return impl.build(impl.settings_from(getattr(cfg, role)), engine, turn)


def chat_backend(cfg: Config, engines: Engines, turn: TurnInputs, priority: str = INTERACTIVE) -> ChatBackend:
    """The LLM's backend for one turn (or one background job), behind the scheduler when there is one."""
    backend: ChatBackend = _stage(cfg, engines, "llm", turn)
    return backend if engines.scheduler is None else ScheduledBackend(backend, engines.scheduler, priority)


def _llm(
    cfg: Config, engines: Engines, turn: TurnInputs, history: tuple[Message, ...], device: ToolSource | None = None
) -> Stage:
    backend = chat_backend(cfg, engines, turn)
    settings = LlmSettings(
        mode=cfg.llm.mode,  # type: ignore[arg-type]
        max_tokens=cfg.llm.max_tokens,
        max_calls=cfg.llm.max_calls,
        temperature=cfg.llm.temperature,
        seed=cfg.llm.seed,
        system_prompt=system_prompt(turn.language),
        # a question of unknown language: the prompt follows the language the ASR detected
        system_prompts=() if turn.language else tuple(SYSTEM_PROMPTS.items()),
    )
    tools = DEVICE_TOOLS if cfg.llm.tools else ()
    executor = ScriptedTools(cfg.llm.tool_latency.salted(turn.salt)) if tools else None
    # A device's own tools (xiaozhi MCP) replace the pretend ones once it has listed them, as on a
    # real server; ``tools = false`` offers none at all, the device's included.
    device = device if cfg.llm.tools else None
    impl = implementation(cfg, "llm")
    scripted = impl.scripted or (engines.llm_endpoint is not None and engines.llm_endpoint.scripted)
    return LlmStage(
        backend, settings, tools, executor, impl=impl.name, scripted=scripted, history=history, device=device
    )


def build_stages(
    cfg: Config,
    engines: Engines,
    question: Question,
    salt: int,
    history: tuple[Message, ...] = (),
    device: ToolSource | None = None,
) -> ServerStages:
    """One turn's stages; ``device``: a device whose own tools the LLM is offered once it has listed them."""
    turn = turn_inputs(question, salt)
    return ServerStages(
        vad=_stage(cfg, engines, "vad", turn),
        asr=_stage(cfg, engines, "asr", turn),
        llm=_llm(cfg, engines, turn, history, device),
        sentences=SentenceSplitter(SplitRules(**dataclasses.asdict(cfg.sentences))),
        tts=_stage(cfg, engines, "tts", turn),
    )


def build_tts(cfg: Config, engines: Engines, question: Question) -> Stage:
    """The TTS alone: a server speaks a reply it keeps ready (the wake word's) with the TTS a run would use."""
    return _stage(cfg, engines, "tts", turn_inputs(question, 0))  # type: ignore[no-any-return]


def build_vad(cfg: Config, engines: Engines, question: Question) -> Stage:
    """The VAD alone: a device emulator finds where a clip's speech ends with the VAD a run would use."""
    return _stage(cfg, engines, "vad", turn_inputs(question, 0))  # type: ignore[no-any-return]
