"""The stage registry: every implementation is found by its ``[role] impl`` name, owns and validates its
settings (the other keys of its role's table), and a new implementation, with an option nobody had before,
needs nothing but its module and one registration."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.events import AudioOut, CallEnd, Event, Sentence, StageInfo, TokenDelta, Transcript
from pipeline.report.identity import HELD_ACROSS_CONDITIONS, condition_defining, flatten
from pipeline.run import assembly
from pipeline.settings import config as settings_config
from pipeline.settings.config import ConfigError, load_config
from pipeline.settings.fixtures import Question
from pipeline.settings.stage_sections import STAGE_SECTIONS, implementation_keys
from stages.catalog import registered, registry
from stages.llm import ChatRequest, Chunk, LlmStage
from stages.registry import ROLES, Implementation, Registry, TurnInputs


def test_every_role_has_implementations_and_the_settings_offer_exactly_those() -> None:
    found = registry()
    choices = settings_config.choices()
    for role in ROLES:
        assert found.names(role), role
        assert choices[(role, "impl")] == found.names(role)


STAGES = [impl for impl in registry().all() if impl.role in STAGE_SECTIONS]
# what a configuration needs beside an implementation's section to be valid at all
BESIDE = {("llm", "openai"): {"cloud": {"emulator": "instant"}}}


@pytest.mark.parametrize("impl", STAGES, ids=lambda i: f"{i.role}.{i.name}")
def test_an_implementations_settings_are_its_own_keys_of_its_roles_table(impl: Implementation) -> None:
    defaults = impl.settings()
    beside = BESIDE.get((impl.role, impl.name), {})
    assert impl.settings_from(STAGE_SECTIONS[impl.role](impl.name)) == defaults
    every_key = {"impl": impl.name, **dataclasses.asdict(defaults)}
    assert impl.settings_from(getattr(load_config(None, {impl.role: every_key, **beside}), impl.role)) == defaults
    with pytest.raises(
        ConfigError, match=rf"\[{impl.role}\] unknown setting\(s\) for impl = '{impl.name}': no_such_key"
    ):
        load_config(None, {impl.role: {"impl": impl.name, "no_such_key": 1}, **beside})


def test_a_section_records_its_role_and_its_chosen_implementation_nothing_else() -> None:
    """One place for every default: no section records another implementation's keys at their defaults."""
    for impl in STAGES:
        cfg = load_config(None, {impl.role: {"impl": impl.name}, **BESIDE.get((impl.role, impl.name), {})})
        recorded = cfg.as_dict()[impl.role]
        own = {f.name for f in dataclasses.fields(impl.settings)}
        assert set(recorded) == {"impl", *STAGE_SECTIONS[impl.role].role_settings(), *own}, impl.name


def test_only_the_llm_role_has_settings_of_its_own_and_the_report_holds_them_across_conditions() -> None:
    assert {role: bool(s.role_settings()) for role, s in STAGE_SECTIONS.items()} == {
        "vad": False,
        "asr": False,
        "llm": True,
        "tts": False,
    }
    role = settings_config.LlmConfig.role_settings()
    assert {pattern.removesuffix(".*") for pattern in HELD_ACROSS_CONDITIONS} == {f"llm.{key}" for key in role}
    for impl in (i for i in STAGES if i.role == "llm"):
        cfg = load_config(None, {"llm": {"impl": impl.name}, **BESIDE.get(("llm", impl.name), {})})
        for key in flatten(cfg.as_dict()["llm"], "llm."):  # as the report reads a trace's settings
            assert condition_defining(key) == (key.split(".")[1] not in role), key
    assert set(implementation_keys("llm")) >= {"model", "n_ctx", "threads", "prompt_cache", "latency"}


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
        ({"llm": {"impl": "llama", "threads": 0}}, r"\[llm\] threads = 0: must be positive"),
        ({"llm": {"impl": "server", "model": ""}}, r"\[llm\] model = '': name a packaged model or a GGUF file"),
        ({"llm": {"impl": "server", "parallel": 0}}, r"\[llm\] parallel = 0: must be positive"),
        ({"llm": {"impl": "llama", "parallel": 2}}, r"for impl = 'llama': parallel; known: "),
        ({"llm": {"impl": "scripted", "latency": {"jitter_ms": -5}}}, r"\[llm.latency\] latency jitter_ms must be"),
        (
            {"llm": {"impl": "scripted", "prompt_cache": "off"}},
            r"for impl = 'scripted': prompt_cache; known: impl, mode, .*, tool_latency, model, latency$",
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
    """The chime's ``[tts]`` keys."""

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


def test_funasr_names_no_model_it_does_not_have_and_refuses_to_load_without_one() -> None:
    cfg = load_config(None, {"asr": {"impl": "funasr"}})
    assert cfg.asr.settings.model == ""  # no FunASR ASR model ships in a package: nothing to default to
    with pytest.raises(ConfigError, match=r"\[asr\] impl = 'funasr' needs model = a FunASR model folder"):
        assembly.load_engines(cfg, Path("/nonexistent"), roles=("asr",))


# --- a new LLM backend, with an option no backend had: its module and one registration ----------


@dataclass(frozen=True, slots=True)
class ParrotSettings:
    """The parrot's ``[llm]`` keys."""

    model: str = "parrot"
    repeat: int = 2  # an option no other LLM backend has: says the question this many times

    def __post_init__(self) -> None:
        if not 1 <= self.repeat <= 5:
            raise ConfigError(f"[llm] repeat = {self.repeat}: say it 1 to 5 times")


class ParrotBackend:
    """An LLM nobody wrote before this test: it repeats the question."""

    server_address = ""

    def __init__(self, s: ParrotSettings, question: str) -> None:
        self.model, self.repeat, self.question = s.model, s.repeat, question

    async def stream(self, request: ChatRequest) -> AsyncIterator[Chunk]:
        for _ in range(self.repeat):
            yield TokenDelta(self.question + " ")
        yield CallEnd("stop", output_tokens=self.repeat, input_tokens=1)


def _parrot(s: ParrotSettings, _engine: None, turn: TurnInputs) -> ParrotBackend:
    return ParrotBackend(s, turn.text)


PARROT = Implementation("llm", "parrot", ParrotSettings, _parrot, scripted=True, label="parrot")


def test_a_new_llm_option_needs_only_its_backends_module_and_registration(tmp_path: Path) -> None:
    path = tmp_path / "parrot.toml"
    path.write_text(
        '[vad]\nimpl = "energy"\n[asr]\nimpl = "oracle"\n[tts]\nimpl = "stub"\n'
        '[llm]\nimpl = "parrot"\nrepeat = 3\nmax_tokens = 32\ntools = false\n'
    )
    with registered(PARROT):  # stands in for the one line in stages/llm/__init__.py
        cfg = load_config(path)
        assert (cfg.llm.settings.repeat, cfg.llm.max_tokens) == (3, 32)  # its own key beside the role's
        with pytest.raises(ConfigError, match=r"\[llm\] repeat = 9: say it 1 to 5 times"):
            load_config(path, {"llm": {"repeat": 9}})
        with pytest.raises(ConfigError, match=r"for impl = 'parrot': n_ctx; known: impl, mode, .*, model, repeat$"):
            load_config(path, {"llm": {"n_ctx": 2048}})  # llama's key is not the parrot's
        with pytest.raises(ConfigError, match=r"for impl = 'llama': repeat; known: impl, mode"):
            load_config(path, {"llm": {"impl": "llama", "repeat": 3}})  # nor the parrot's llama's
        assert cfg.as_dict()["llm"]["repeat"] == 3  # traced, and part of config_id...
        assert load_config(path, {"llm": {"repeat": 4}}).config_id("q") != cfg.config_id("q")
        assert condition_defining("llm.repeat")  # ...and the backend's own: it may differ between conditions
        engines = assembly.load_engines(cfg, Path("/nonexistent"))
        question = Question("q1", "en", "chat", "hello", Path("q1.wav"))
        stage = assembly.build_stages(cfg, engines, question, salt=1).llm
        assert isinstance(stage, LlmStage) and isinstance(stage.backend, ParrotBackend)
        assert stage.backend.repeat == 3 and stage.settings.max_tokens == 32

        async def answer() -> str:
            async def transcript() -> AsyncIterator[Event]:
                yield Transcript("hello", "en")

            return "".join([e.text async for e in stage.run(transcript()) if isinstance(e, TokenDelta)])

        assert asyncio.run(answer()) == "hello hello hello "
    with pytest.raises(ConfigError, match="choose one of"):
        load_config(path)  # registered only for the block


def test_a_backend_may_not_declare_a_setting_of_the_role() -> None:
    @dataclass(frozen=True, slots=True)
    class Greedy:
        max_tokens: int = 8  # the role's: the stage asks it of every backend

    refused = r"\[llm\] impl = 'greedy' declares the role's own setting\(s\) max_tokens"
    with registered(Implementation("llm", "greedy", Greedy, _parrot)), pytest.raises(ConfigError, match=refused):
        load_config(None, {"llm": {"impl": "greedy"}})
