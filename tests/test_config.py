from pathlib import Path

import pytest

from pipeline.settings.config import Config, ConfigError, LlmConfig, RunConfig, load_config


def test_config_id_is_stable_and_ignores_rounds_and_limit() -> None:
    base = Config()
    assert base.config_id("q") == Config().config_id("q")
    assert len(base.config_id("q")) == 12
    assert Config(run=RunConfig(rounds=9, limit=3)).config_id("q") == base.config_id("q")


@pytest.mark.parametrize(
    "changed",
    [
        Config(run=RunConfig(condition="A")),
        Config(run=RunConfig(pacing="fast")),
        Config(run=RunConfig(turn_timeout_s=5)),
        Config(llm=LlmConfig(mode="per-sentence")),
        Config(llm=LlmConfig(max_tokens=64)),
        Config(llm=LlmConfig(tools=False)),
    ],
)
def test_config_id_changes_with_every_latency_setting(changed: Config) -> None:
    assert changed.config_id("q") != Config().config_id("q")


def test_config_id_changes_with_the_question_set() -> None:
    assert Config().config_id("a") != Config().config_id("b")


def test_toml_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[run]\ncondition = "A"\n[llm]\nmax_tokens = 64\n[llm.latency]\nfirst_ms = 500\n')
    cfg = load_config(path, {"run": {"rounds": 5}})
    assert (cfg.run.condition, cfg.run.rounds, cfg.llm.max_tokens, cfg.llm.latency.first_ms) == ("A", 5, 64, 500.0)
    assert cfg.llm.latency.per_item_ms == 0.0  # a table given replaces the default profile as a whole


def test_later_files_override_earlier_ones(tmp_path: Path) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text("[llm]\nmax_tokens = 64\nmode = 'per-sentence'\n")
    b.write_text("[llm]\nmax_tokens = 32\n")
    cfg = load_config([a, b])
    assert (cfg.llm.max_tokens, cfg.llm.mode) == (32, "per-sentence")


def test_a_later_file_that_names_another_implementation_starts_its_section_afresh(tmp_path: Path) -> None:
    sim, whisper, beam = tmp_path / "sim.toml", tmp_path / "whisper.toml", tmp_path / "beam.toml"
    sim.write_text('[asr]\nimpl = "oracle"\nlatency = { first_ms = 300 }\n')
    whisper.write_text('[asr]\nimpl = "whisper"\nmodel = "whisper-base"\n')
    beam.write_text("[asr]\nbeam_size = 2\n")
    cfg = load_config([sim, whisper, beam])
    assert (cfg.asr.impl, cfg.asr.settings.model, cfg.asr.settings.beam_size) == ("whisper", "whisper-base", 2)
    with pytest.raises(ConfigError, match=r"unknown setting.*beam_size"):  # the same impl's keys still merge
        load_config([sim, beam])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[llm]\nmodle = 'x'\n", "[llm] unknown setting(s): modle"),
        ("[nope]\n", "unknown section(s): nope"),
        ("[run]\nrounds = 0\n", "[run] rounds = 0: must be positive"),
        ("[run]\nrounds = 'two'\n", "[run] rounds = 'two': expected int"),
        ("[run]\ncondition = 'A B'\n", "[run] condition = 'A B'"),
        ("[llm.latency]\nfirst_ms = -1\n", "[llm.latency] latencies must be >= 0"),
        ("[run]\nclock = 'virtual'\npacing = 'fast'\n", "simulates real time"),
        ("not toml [", "not valid TOML"),
    ],
)
def test_bad_settings_name_the_file_and_the_setting(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "none.toml")
