"""The stage registry: every implementation is found by its ``[role] impl`` name, its settings are read
from its role's section, and a new implementation needs nothing but its module and one registration."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.events import AudioOut, Event, Sentence, StageInfo
from pipeline.run import assembly
from pipeline.settings import config as settings_config
from pipeline.settings.config import Config, ConfigError, TtsConfig, load_config
from pipeline.settings.fixtures import Question
from stages import registry as stage_registry
from stages.registry import ROLES, Implementation, Registry, TurnInputs, registry

SECTIONS = {"vad": settings_config.VadConfig, "asr": settings_config.AsrConfig, "llm": settings_config.LlmConfig,
            "tts": settings_config.TtsConfig}  # fmt: skip


def test_every_role_has_implementations_and_the_settings_offer_exactly_those() -> None:
    found = registry()
    choices = settings_config.choices()
    for role in ROLES:
        assert found.names(role), role
        assert choices[(role, "impl")] == found.names(role)


@pytest.mark.parametrize("impl", registry().all(), ids=lambda i: f"{i.role}.{i.name}")
def test_an_implementations_settings_are_read_by_name_from_its_section(impl: Implementation) -> None:
    section = SECTIONS[impl.role]()
    own = {f.name: f for f in dataclasses.fields(impl.settings)}
    theirs = {f.name for f in dataclasses.fields(section)}
    assert set(own) <= theirs, f"{impl.name}: {sorted(set(own) - theirs)} missing from [{impl.role}]"
    read = impl.settings_from(section)
    for name in own:
        assert getattr(read, name) == getattr(section, name)


def test_unknown_impl_names_the_choices_from_the_registry(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[tts]\nimpl = "nope"\n')
    with pytest.raises(ConfigError, match="choose one of espeak, piper, stub"):
        load_config(path)


def test_a_role_cannot_register_the_same_name_twice() -> None:
    twice = registry().get("tts", "stub")
    with pytest.raises(ValueError, match="registered twice"):
        Registry((twice, twice))


# --- a new implementation: its module and one registration -------------------------------------


@dataclass(frozen=True, slots=True)
class ChimeSettings:
    real_time_factor: float = 0.15


class ChimeTts:
    """A TTS nobody wrote before this test: one silent frame per sentence."""

    def __init__(self) -> None:
        self.info = StageInfo(role="tts", impl="chime")

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if isinstance(event, Sentence):
                yield AudioOut(sentence_index=event.index, seq=0, pcm=bytes(1920))


def _build(_s: ChimeSettings, _engine: None, _turn: TurnInputs) -> ChimeTts:
    return ChimeTts()


CHIME = Implementation("tts", "chime", ChimeSettings, _build, scripted=True)


def test_a_new_implementation_needs_only_its_module_and_its_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    extended = Registry((*registry().all(), CHIME))
    monkeypatch.setattr(stage_registry, "registry", lambda: extended)
    monkeypatch.setattr(settings_config, "registry", lambda: extended)
    monkeypatch.setattr(assembly, "registry", lambda: extended)
    cfg = Config(
        asr=settings_config.AsrConfig(impl="oracle"),
        llm=settings_config.LlmConfig(impl="scripted"),
        vad=settings_config.VadConfig(impl="energy"),
        tts=TtsConfig(impl="chime"),
    )
    engines = assembly.load_engines(cfg, Path("/nonexistent"))
    question = Question("q1", "en", "chat", "hello", Path("q1.wav"))
    stages = assembly.build_stages(cfg, engines, question, salt=1)
    assert isinstance(stages.tts, ChimeTts)
