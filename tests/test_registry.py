"""The stage registry: every implementation is found by its ``[role] impl`` name, owns and validates its
settings (the other keys of its role's table), and a new implementation, with an option nobody had before,
needs nothing but its module and one registration."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.events import AudioOut, Event, Sentence, StageInfo
from pipeline.run import assembly
from pipeline.settings import config as settings_config
from pipeline.settings.config import ConfigError, load_config
from pipeline.settings.fixtures import Question
from pipeline.settings.stage_sections import STAGE_SECTIONS
from stages.catalog import registered, registry
from stages.registry import ROLES, Implementation, Registry, TurnInputs


def test_every_role_has_implementations_and_the_settings_offer_exactly_those() -> None:
    found = registry()
    choices = settings_config.choices()
    for role in ROLES:
        assert found.names(role), role
        assert choices[(role, "impl")] == found.names(role)


STAGES = [impl for impl in registry().all() if impl.role in STAGE_SECTIONS]


@pytest.mark.parametrize("impl", STAGES, ids=lambda i: f"{i.role}.{i.name}")
def test_an_implementations_settings_are_its_own_keys_of_its_roles_table(impl: Implementation) -> None:
    defaults = impl.settings()
    assert impl.settings_from(STAGE_SECTIONS[impl.role](impl.name)) == defaults
    every_key = {"impl": impl.name, **dataclasses.asdict(defaults)}
    assert impl.settings_from(getattr(load_config(None, {impl.role: every_key}), impl.role)) == defaults
    with pytest.raises(
        ConfigError, match=rf"\[{impl.role}\] unknown setting\(s\) for impl = '{impl.name}': no_such_key"
    ):
        load_config(None, {impl.role: {"impl": impl.name, "no_such_key": 1}})


@pytest.mark.parametrize("impl", [i for i in registry().all() if i.role == "llm"], ids=lambda i: i.name)
def test_an_llms_settings_are_read_by_name_from_the_role_wide_section(impl: Implementation) -> None:
    section = settings_config.LlmConfig()
    own = {f.name for f in dataclasses.fields(impl.settings)}
    assert own <= {f.name for f in dataclasses.fields(section)}
    read = impl.settings_from(section)
    assert all(getattr(read, name) == getattr(section, name) for name in own)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"vad": {"impl": "silero", "threshold": 1.5}}, r"\[vad\] threshold = 1.5: a speech probability"),
        ({"vad": {"impl": "energy", "silence_ms": 0}}, r"\[vad\] silence_ms = 0: must be positive"),
        ({"vad": {"impl": "fsmn", "silence_ms": -1}}, r"\[vad\] silence_ms = -1: must be positive"),
        ({"asr": {"impl": "whisper", "beam_size": 0}}, r"\[asr\] beam_size = 0: must be positive"),
        ({"tts": {"impl": "espeak", "words_per_minute": 0}}, r"\[tts\] words_per_minute = 0: must be positive"),
        ({"tts": {"impl": "stub", "real_time_factor": -0.1}}, r"\[tts\] real_time_factor = -0.1: must be >= 0"),
        (
            {"tts": {"impl": "stub", "words_per_minute": 160}},
            r"for impl = 'stub': words_per_minute; known: impl, first_frame",
        ),
    ],
)
def test_each_implementation_refuses_its_own_bad_settings_naming_the_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, table)


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
    chime_hz: float = 880.0  # an option no other implementation has

    def __post_init__(self) -> None:
        if not 20 <= self.chime_hz <= 20_000:
            raise ConfigError(f"[tts] chime_hz = {self.chime_hz}: an audible pitch, 20 to 20000 Hz")


class ChimeTts:
    """A TTS nobody wrote before this test: one silent frame per sentence."""

    def __init__(self, hz: float) -> None:
        self.hz = hz
        self.info = StageInfo(role="tts", impl="chime")

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if isinstance(event, Sentence):
                yield AudioOut(sentence_index=event.index, seq=0, pcm=bytes(1920))


def _build(s: ChimeSettings, _engine: None, _turn: TurnInputs) -> ChimeTts:
    return ChimeTts(s.chime_hz)


CHIME = Implementation("tts", "chime", ChimeSettings, _build, scripted=True)


def test_a_new_implementation_needs_only_its_module_and_its_registration(tmp_path: Path) -> None:
    path = tmp_path / "chime.toml"
    path.write_text(
        '[vad]\nimpl = "energy"\n[asr]\nimpl = "oracle"\n[llm]\nimpl = "scripted"\n'
        '[tts]\nimpl = "chime"\nchime_hz = 440\n'
    )
    with registered(CHIME):  # stands in for the one line in stages/tts/__init__.py
        cfg = load_config(path)
        with pytest.raises(ConfigError, match=r"\[tts\] chime_hz = 5.0: an audible pitch"):
            load_config(path, {"tts": {"chime_hz": 5}})
        with pytest.raises(ConfigError, match=r"for impl = 'chime': words_per_minute; known: impl, chime_hz"):
            load_config(path, {"tts": {"words_per_minute": 160}})
        engines = assembly.load_engines(cfg, Path("/nonexistent"))
        question = Question("q1", "en", "chat", "hello", Path("q1.wav"))
        stages = assembly.build_stages(cfg, engines, question, salt=1)
        assert isinstance(stages.tts, ChimeTts) and stages.tts.hz == 440.0
        assert cfg.as_dict()["tts"]["chime_hz"] == 440.0  # traced, and part of config_id
    with pytest.raises(ConfigError, match="choose one of"):
        load_config(path)  # registered only for the block
