import pytest

from pipeline.settings.config import Config, ConfigError, load_config
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT


def test_the_local_config_is_the_documented_default() -> None:
    assert load_config(ROOT / "configs" / "local.toml") == Config()


def test_the_simulator_config_simulates_asr_llm_and_tts() -> None:
    cfg = load_config(ROOT / "configs" / "simulator.toml")
    assert (cfg.vad.impl, cfg.asr.impl, cfg.llm.impl, cfg.tts.impl) == ("energy", "oracle", "scripted", "stub")


def test_the_virtual_clock_refuses_real_stages() -> None:
    with pytest.raises(ConfigError, match="needs simulated stages"):
        load_config(None, {"run": {"clock": "virtual"}})
