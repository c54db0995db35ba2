"""Condition A through the replay: the emulated cloud behind the link emulator, and bad cloud settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.records.bench_csv import read_bench_csv
from pipeline.replay import main
from tests.fixture_files import make_fixtures
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
SIM = str(ROOT / "configs" / "simulator.toml")


def replay(tmp_path: Path, cloud: str, env: dict[str, str] | None = None) -> int:
    config = tmp_path / "cloud.toml"
    config.write_text(cloud)
    fx = make_fixtures(tmp_path / "fx", ["q1", "q2"])
    args = [str(fx), "--config", SIM, "--config", str(config), "--fast", "--rounds", "1", "--out", str(tmp_path)]
    return main([*args, "--condition", "A", "--quiet"], env=env or {})


@pytest.mark.realtime
def test_emulated_cloud_rows_say_so_and_carry_server_timings(tmp_path: Path) -> None:
    code = replay(
        tmp_path, '[llm]\nimpl = "openai"\nmodel = "m"\n[cloud]\nemulator = "instant"\n[network]\nprofile = "lan"\n'
    )
    assert code == 0
    rows = read_bench_csv(tmp_path / "bench.csv")
    assert [r.ok for r in rows] == [1, 1]
    for r in rows:
        assert r.llm_endpoint == "emulated cloud, profile instant; network lan"
        assert "llm" in str(r.scripted)  # the server's compute is simulated
        assert r.server_prompt_ms is not None
        assert r.llm_first_chunk_ms <= r.first_token_ms  # type: ignore[operator]


@pytest.mark.parametrize(
    ("cloud", "message"),
    [
        (
            '[llm]\nimpl = "openai"\n[cloud]\nemulator = "instant"\n[network]\nprofile = "moon"\n',
            "unknown network profile 'moon'",
        ),
        ('[llm]\nimpl = "openai"\n[cloud]\nemulator = "huge"\n', "'huge'"),
        ('[llm]\nimpl = "openai"\n', "needs [cloud] base_url"),
        ('[network]\nprofile = "lan"\n', "applies to [llm] impl = 'openai' only"),
    ],
)
def test_bad_cloud_settings_stop_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cloud: str, message: str
) -> None:
    assert replay(tmp_path, cloud) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "bench.csv").exists()


def test_a_missing_api_key_is_recorded_on_every_turn_and_the_run_continues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cloud = '[llm]\nimpl = "openai"\nmodel = "m"\n[cloud]\nemulator = "instant"\napi_key_env = "LAB_TEST_KEY"\n'
    assert replay(tmp_path, cloud, env={}) == 0
    assert "LAB_TEST_KEY is not set: every turn will be ok=0, error=LlmMissingApiKey" in capsys.readouterr().err
    rows = read_bench_csv(tmp_path / "bench.csv")
    assert [(r.ok, r.error) for r in rows] == [(0, "LlmMissingApiKey"), (0, "LlmMissingApiKey")]


@pytest.mark.realtime
def test_the_key_itself_is_never_written(tmp_path: Path) -> None:
    cloud = '[llm]\nimpl = "openai"\nmodel = "m"\n[cloud]\nemulator = "instant"\napi_key_env = "LAB_TEST_KEY"\n'
    secret = "sk-test-0123456789abcdef"
    assert replay(tmp_path, cloud, env={"LAB_TEST_KEY": secret}) == 0
    written = [
        p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".csv", ".jsonl")
    ]
    assert written and not any(secret in text for text in written)
