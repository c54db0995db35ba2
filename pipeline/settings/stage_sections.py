"""The ``[vad]``, ``[asr]`` and ``[tts]`` sections: ``impl``, and the chosen implementation's own settings.

Every key of such a table other than ``impl`` belongs to the implementation it names: it is
read into that implementation's settings class (declared beside its code, in ``stages/``),
which refuses an unknown key (listing the ones it has) and a bad value (naming the key). So
``[tts] impl = "espeak"`` sits beside ``words_per_minute = 160`` as it always has, and a
new implementation with a new option adds nothing here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from pipeline.events import LatencyProfile, XiaozhiServerProfile
from stages.catalog import registry
from stages.registry import ConfigError


class StageSection:
    """A role's section whose settings its implementation owns. ``VadConfig(impl="energy",
    threshold_dbfs=-40)`` reads like the TOML it stands for; ``settings`` is the implementation's object."""

    __slots__ = ()
    ROLE: ClassVar[str]
    DEFAULT: ClassVar[str]  # the implementation when the table names none
    impl: str
    settings: Any  # e.g. stages.tts.espeak.EspeakSettings

    def __init__(self, impl: str = "", settings: Any = None, **options: Any) -> None:
        impl = impl or self.DEFAULT
        try:
            found = registry().get(self.ROLE, impl)
        except KeyError as exc:
            raise ConfigError(exc.args[0]) from None
        if settings is None:
            settings = found.settings_of(options)
        elif options:
            raise TypeError(f"[{self.ROLE}] impl = {impl!r}: pass its settings object or its keys, not both")
        elif not isinstance(settings, found.settings):
            raise TypeError(
                f"[{self.ROLE}] impl = {impl!r} takes {found.settings.__name__}, not {type(settings).__name__}"
            )
        object.__setattr__(self, "impl", impl)
        object.__setattr__(self, "settings", settings)

    @classmethod
    def from_table(cls, data: object, where: str) -> StageSection:
        """The section a TOML table describes."""
        if not isinstance(data, dict):
            raise ConfigError(f"[{where}] must be a table")
        options = dict(data)
        return cls(options.pop("impl", ""), **options)


@dataclass(frozen=True, slots=True, init=False)
class VadConfig(StageSection):
    """``[vad]``: "silero", "energy", or "fsmn" (FunASR, needs the funasr extra); see each one's settings."""

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
class TtsConfig(StageSection):
    """``[tts]``: "espeak", "piper" (English only), "stub", or "service" (an OpenAI-compatible speech service)."""

    ROLE: ClassVar[str] = "tts"
    DEFAULT: ClassVar[str] = "espeak"
    impl: str
    settings: Any


STAGE_SECTIONS: dict[str, type[StageSection]] = {"vad": VadConfig, "asr": AsrConfig, "tts": TtsConfig}

# config_id and the traced settings keep each section in its shape from before implementations owned
# their settings (every key any implementation had, at its old default, under the chosen one's values),
# so a configuration that did not change keeps its id. A new implementation's keys appear only when chosen.
_RECORDED_DEFAULTS: dict[str, dict[str, Any]] = {
    "vad": {"model": "silero-vad", "threshold": 0.5, "threshold_dbfs": -45.0, "silence_ms": 600,
            "min_speech_ms": 120, "profile": "lab", "xiaozhi_server": dataclasses.asdict(XiaozhiServerProfile())},
    "asr": {"model": "whisper-base", "beam_size": 1, "threads": 2, "url": "",
            "latency": dataclasses.asdict(LatencyProfile(first_ms=300, jitter_ms=40, seed=1))},
    "tts": {"voice": "piper-joe", "words_per_minute": 160, "real_time_factor": 0.15, "url": "",
            "first_frame": dataclasses.asdict(LatencyProfile(first_ms=180, jitter_ms=30, seed=3))},
}  # fmt: skip


def recorded(role: str, section: dict[str, Any]) -> dict[str, Any]:
    """What traces and config_id record of a section (``dataclasses.asdict`` of it): one flat table."""
    return {**_RECORDED_DEFAULTS[role], "impl": section["impl"], **section["settings"]}
