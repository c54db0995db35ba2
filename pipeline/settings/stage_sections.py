"""The ``[vad]``, ``[asr]``, ``[llm]`` and ``[tts]`` sections: ``impl``, the role's own settings, and the
chosen implementation's.

Every key of such a table other than ``impl`` and the role's own belongs to the implementation
``impl`` names: it is read into that implementation's settings class (declared beside its code,
in ``stages/``), which refuses an unknown key (the message lists every key the table may hold)
and a bad value (naming the key). So ``[tts] impl = "espeak"`` sits beside ``words_per_minute =
160`` and ``[llm] impl = "llama"`` beside ``n_ctx = 2048`` as they always have, and a new
implementation with a new option adds nothing here. Only the LLM role has settings of its own
(``LlmConfig``'s fields): what the LLM stage asks every backend for, whichever it is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from pipeline.events import LatencyProfile
from stages.catalog import LLM_ROLE_DEFAULTS, registry
from stages.registry import ConfigError, read_values

_CHOSEN = ("impl", "settings")  # a section's fields that are not the role's own settings


class StageSection:
    """A role's section whose settings its implementation owns. ``VadConfig(impl="energy",
    threshold_dbfs=-40)`` reads like the TOML it stands for; ``settings`` is the implementation's object,
    and the section's other fields (the LLM's ``max_tokens``...) are the role's own."""

    __slots__ = ()
    ROLE: ClassVar[str]
    DEFAULT: ClassVar[str]  # the implementation when the table names none
    impl: str
    settings: Any

    def __init__(self, impl: str = "", settings: Any = None, **options: Any) -> None:
        impl = impl or self.DEFAULT
        try:
            found = registry().get(self.ROLE, impl)
        except KeyError as exc:
            raise ConfigError(exc.args[0]) from None
        own = self.role_settings()
        clash = sorted(own.keys() & {f.name for f in dataclasses.fields(found.settings)})
        if clash:  # the role's key would hide the implementation's: a mistake in the implementation
            raise ConfigError(f"[{self.ROLE}] impl = {impl!r} declares the role's own setting(s) {', '.join(clash)}")
        for name, default in own.items():
            object.__setattr__(self, name, options.pop(name, default))
        if settings is None:
            settings = found.settings_of(options, role_keys=tuple(own))
        elif options:
            raise TypeError(f"[{self.ROLE}] impl = {impl!r}: pass its settings object or its keys, not both")
        elif not isinstance(settings, found.settings):
            raise TypeError(
                f"[{self.ROLE}] impl = {impl!r} takes {found.settings.__name__}, not {type(settings).__name__}"
            )
        object.__setattr__(self, "impl", impl)
        object.__setattr__(self, "settings", settings)

    @classmethod
    def role_settings(cls) -> dict[str, Any]:
        """The role's own settings (every field but ``impl`` and ``settings``) and their defaults."""
        own = dataclasses.fields(cls)  # type: ignore[arg-type]  # every subclass is a dataclass; the base is not
        return {f.name: f.default for f in own if f.name not in _CHOSEN}

    @classmethod
    def from_table(cls, data: object, where: str) -> StageSection:
        """The section a TOML table describes."""
        if not isinstance(data, dict):
            raise ConfigError(f"[{where}] must be a table")
        options = dict(data)
        impl = options.pop("impl", "")
        own = cls.role_settings()
        given = {name: options.pop(name) for name in own if name in options}
        return cls(impl, **read_values(own, given, where), **options)


@dataclass(frozen=True, slots=True, init=False)
class VadConfig(StageSection):
    """``[vad]``: "silero", "energy", "fsmn" (FunASR, needs the funasr extra), "ten" (TEN VAD, the ten extra) or
    "smart-turn" (Pipecat's Smart Turn v3.2 end-of-turn model stacked on silero, ten or energy: the smartturn extra
    and the pipecat-ai model package); see each one's settings."""

    ROLE: ClassVar[str] = "vad"
    DEFAULT: ClassVar[str] = "silero"
    impl: str
    settings: Any


@dataclass(frozen=True, slots=True, init=False)
class AsrConfig(StageSection):
    """``[asr]``: "whisper", "funasr" (a FunASR model folder), "oracle" (reference text), "service" (HTTP)."""

    ROLE: ClassVar[str] = "asr"
    DEFAULT: ClassVar[str] = "whisper"
    impl: str
    settings: Any


@dataclass(frozen=True, slots=True, init=False)
class LlmConfig(StageSection):
    """``[llm]``: "llama" (in-process), "server" (llama.cpp's server, its own process), "openai" (see
    ``[cloud]``) or "scripted", with the chosen backend's settings (``model``, llama's ``n_ctx``, the
    scripted one's ``latency``...: ``stages/llm/``).

    The fields below are the role's own: what the LLM stage asks every backend for, so a condition
    that swaps the backend keeps them (METHOD M9, M11)."""

    ROLE: ClassVar[str] = "llm"
    DEFAULT: ClassVar[str] = "llama"
    impl: str
    # declared once, by the stage that asks them of every backend
    mode: str = LLM_ROLE_DEFAULTS.mode  # or "per-sentence"
    max_tokens: int = LLM_ROLE_DEFAULTS.max_tokens
    max_calls: int = LLM_ROLE_DEFAULTS.max_calls  # bounds the per-sentence and tool loops
    tools: bool = True  # offer the device tools (a device's own, over MCP, once it lists them)
    temperature: float = 0.0  # asked of every call; a scripted backend has none
    seed: int = 1234  # asked of every call
    history_rounds: int = 0  # earlier turns kept as context (METHOD M18); 0 = every question fresh (M5)
    tool_latency: LatencyProfile = LatencyProfile(first_ms=40, seed=4)  # the pretend device's tools
    settings: Any = None


@dataclass(frozen=True, slots=True, init=False)
class TtsConfig(StageSection):
    """``[tts]``: "espeak", "piper" (English only), "stub", or "service" (an OpenAI-compatible speech service)."""

    ROLE: ClassVar[str] = "tts"
    DEFAULT: ClassVar[str] = "espeak"
    impl: str
    settings: Any


STAGE_SECTIONS: dict[str, type[StageSection]] = {"vad": VadConfig, "asr": AsrConfig, "llm": LlmConfig, "tts": TtsConfig}


def recorded(section: dict[str, Any]) -> dict[str, Any]:
    """What traces and config_id record of a section (``dataclasses.asdict`` of it): one flat table, as
    its TOML is written: ``impl``, the role's own settings, and the chosen implementation's."""
    return {**{k: v for k, v in section.items() if k != "settings"}, **section["settings"]}


def implementation_keys(role: str) -> tuple[str, ...]:
    """Every key some implementation of ``role`` declares (the LLM backends': ``model``, ``n_ctx``,
    ``latency``...): what may differ where the implementation does."""
    found = {f.name for impl in registry().all() if impl.role == role for f in dataclasses.fields(impl.settings)}
    return tuple(sorted(found))
