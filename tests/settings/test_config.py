from pathlib import Path

import pytest

from pipeline.settings.config import CONFIG_VERSION, Config, ConfigError, LlmConfig, RunConfig, load_config


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
        Config(llm=LlmConfig(temperature=0.7)),
        Config(llm=LlmConfig(n_ctx=4096)),
        Config(llm=LlmConfig(impl="scripted", latency={"first_ms": 351})),
    ],
)
def test_config_id_changes_with_every_latency_setting(changed: Config) -> None:
    assert changed.config_id("q") != Config().config_id("q")


def test_config_id_changes_with_the_question_set() -> None:
    assert Config().config_id("a") != Config().config_id("b")


def test_the_settings_record_their_version_and_only_the_chosen_implementations_keys() -> None:
    recorded = Config(llm=LlmConfig(impl="scripted")).as_dict()
    assert recorded["config_version"] == CONFIG_VERSION == 2
    assert "n_ctx" not in recorded["llm"] and "prompt_cache" not in recorded["llm"]  # llama's, not a script's
    assert recorded["llm"]["latency"]["first_ms"] == 350 and recorded["llm"]["max_tokens"] == 96
    assert "beam_size" in recorded["asr"] and "latency" not in recorded["asr"]  # whisper's; the oracle's is not


def test_toml_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[run]\ncondition = "A"\n[llm]\nimpl = "scripted"\nmax_tokens = 64\n[llm.latency]\nfirst_ms = 500\n'
    )
    cfg = load_config(path, {"run": {"rounds": 5}})
    latency = cfg.llm.settings.latency
    assert (cfg.run.condition, cfg.run.rounds, cfg.llm.max_tokens, latency.first_ms) == ("A", 5, 64, 500.0)
    assert latency.per_item_ms == 0.0  # a table given replaces the default profile as a whole


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


def test_a_later_file_that_names_another_llm_keeps_the_roles_own_settings(tmp_path: Path) -> None:
    local, cloud = tmp_path / "local.toml", tmp_path / "cloud.toml"
    local.write_text('[llm]\nimpl = "llama"\nn_ctx = 4096\nmax_tokens = 64\ntemperature = 0.5\nmode = "per-sentence"\n')
    cloud.write_text('[llm]\nimpl = "openai"\nmodel = "qwen-max"\n[cloud]\nemulator = "instant"\n')
    cfg = load_config([local, cloud])  # llama's n_ctx means nothing to a cloud: not carried over, not refused
    assert (cfg.llm.impl, cfg.llm.settings.model) == ("openai", "qwen-max")
    assert (cfg.llm.max_tokens, cfg.llm.temperature, cfg.llm.mode) == (64, 0.5, "per-sentence")  # asked of both


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[llm]\nmodle = 'x'\n", "[llm] unknown setting(s) for impl = 'llama': modle; known: impl, mode"),
        ("[llm]\nimpl = 'scripted'\nn_ctx = 512\n", "for impl = 'scripted': n_ctx; known: impl, mode"),
        ("[llm]\nn_ctx = 0\n", "[llm] n_ctx = 0: must be positive"),
        ("[llm]\nprompt_cache = 'all'\n", "[llm] prompt_cache = 'all': choose one of off, prefix, carry"),
        ("[nope]\n", "unknown section(s): nope"),
        ("[run]\nrounds = 0\n", "[run] rounds = 0: must be positive"),
        ("[run]\nrounds = 'two'\n", "[run] rounds = 'two': expected int"),
        ("[run]\ncondition = 'A B'\n", "[run] condition = 'A B'"),
        ("[llm]\nimpl = 'scripted'\n[llm.latency]\nfirst_ms = -1\n", "[llm.latency] latency first_ms must be >= 0"),
        ("[llm]\nmax_tokens = 'many'\n", "[llm] max_tokens = 'many': expected int"),
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
