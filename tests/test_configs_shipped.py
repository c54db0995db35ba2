from pathlib import Path

from pipeline.config import Config, load_config

ROOT = Path(__file__).resolve().parent.parent


def test_the_simulator_config_is_the_documented_default() -> None:
    assert load_config(ROOT / "configs" / "simulator.toml") == Config()
