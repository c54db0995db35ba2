"""A run's plan (``pipeline.plan``): checked when built, frozen, holding no secret, and written back as the
replay's command line that the replay parses into the same plan; the capacity ramp's and the sweep's plans are
the ones the replay would make of that command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.capacity.profile import load_profile
from pipeline.capacity.ramp import Target, step_plan
from pipeline.plan.command_line import replay_argv
from pipeline.plan.run_plan import DeviceOptions, RunPlan
from pipeline.replay import parse_args, plan_of
from pipeline.settings.config import ConfigError
from pipeline.sweep.points import Point
from pipeline.sweep.runner import RunOptions, point_plan
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
FIXTURES = ROOT / "audio_fixtures"
SIMULATOR = ROOT / "configs" / "simulator.toml"


def parsed(plan: RunPlan) -> RunPlan:
    """The plan the replay makes of ``plan`` written as its command line."""
    args = parse_args(replay_argv(plan))
    return plan_of(args, args.run_id)


def test_a_plan_written_as_the_replay_command_line_is_parsed_back_into_itself(tmp_path: Path) -> None:
    sections: dict[str, dict[str, Any]] = {
        "run": {"condition": "B", "rounds": 2, "limit": 1, "clock": "real", "turn_timeout_s": 7.5, "pacing": "fast"},
        "llm": {"mode": "per-sentence"},
        "probe": {"temp_command": "cat /sys/class/thermal/thermal_zone0/temp"},
        "fleet": {"devices": 4, "arrival": "staggered", "gap_ms": 125.5},
        "scheduler": {"concurrency": 1},
        "background": {"job": "summarise"},
    }
    device = DeviceOptions(
        server="mqtt://127.0.0.1:1883/device-server?group=g",
        token_env="MY_TOKEN",
        mqtt_signature_key_env="",
        protocol_version=3,
        listen_mode="manual",
        jitter_frames=2,
        uplink_encoder="lab",
        link_profile="lan",
        record_audio=tmp_path / "rec",
        barge_in_after_ms=800,
        barge_in_with="button",
        speaker="room",
        voice="mouth",
    )
    plan = RunPlan(
        FIXTURES,
        "r-1",
        (SIMULATOR, tmp_path / "more.toml"),
        sections,
        language="zh",
        out=tmp_path / "out",
        append=True,
        model_cache=tmp_path / "cache",
        device=device,
        workers=2,
        ray_address="auto",
        net_audit=tmp_path / "audit.jsonl",
        quiet=True,
    )
    assert parsed(plan) == plan
    bare = RunPlan(FIXTURES, "r-2")
    assert replay_argv(bare) == [str(FIXTURES), "--out", ".", "--run-id", "r-2"]
    assert parsed(bare) == bare


def test_a_setting_no_option_sets_is_refused_for_the_command_line() -> None:
    plan = RunPlan(FIXTURES, "r", overrides={"llm": {"max_tokens": 32}})
    with pytest.raises(ValueError, match=r"\[llm\] max_tokens = 32: no replay option sets it"):
        replay_argv(plan)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"speaker": "room"}, "--speaker and --voice are a device's: they need --server"),
        ({"record_audio": Path("rec")}, "--record-audio records emulated devices: it needs --server"),
        (
            {"server": "tcp://x"},
            "--server 'tcp://x': a ws://, wss://, mqtt://, http(s):// OTA, twilio+ws(s):// or pipecat+ws(s):// URL "
            "is expected",
        ),
        ({"server": "ws://h/", "jitter_frames": -1}, "--jitter-frames -1: 0 or more"),
    ],
)
def test_what_a_plan_cannot_ask_is_refused_when_it_is_built(given: dict[str, Any], said: str) -> None:
    with pytest.raises(ValueError) as refused:
        RunPlan(FIXTURES, "r", device=DeviceOptions(**given))
    assert str(refused.value) == said


def test_what_its_settings_cannot_give_is_refused_when_they_are_read() -> None:
    virtual = {"run": {"clock": "virtual"}}
    server = DeviceOptions(server="ws://127.0.0.1:1/xiaozhi/v1/")
    with pytest.raises(ValueError, match="--server needs the real clock"):
        RunPlan(FIXTURES, "r", (SIMULATOR,), virtual, device=server).config()
    with pytest.raises(ValueError, match=r"--workers 3: between 1 and the number of devices \(2\)"):
        RunPlan(FIXTURES, "r", (SIMULATOR,), {"fleet": {"devices": 2}}, workers=3).config()
    with pytest.raises(ValueError, match="--turn-gate takes one turn at a time"):
        RunPlan(FIXTURES, "r", (SIMULATOR,), {"fleet": {"devices": 2}}, turn_gate=True).config()
    with pytest.raises(ConfigError):
        RunPlan(FIXTURES, "r", (SIMULATOR,), {"fleet": {"devices": 0}}).config()


def test_a_plan_is_frozen_and_names_its_secrets_only() -> None:
    sections = {"run": {"rounds": 2}}
    plan = RunPlan(FIXTURES, "r", overrides=sections, device=DeviceOptions(server="ws://h/", token_env="T"))
    sections["run"]["rounds"] = 5  # the plan keeps what it was given
    assert plan.sections() == {"run": {"rounds": 2}}
    with pytest.raises(TypeError):
        plan.overrides["run"]["rounds"] = 3  # type: ignore[index]
    assert "T" in repr(plan) and plan.device.token_env == "T"
    with pytest.raises(ValueError, match="run id"):
        RunPlan(FIXTURES, "")


@pytest.mark.parametrize("arrival", ["together", "staggered", "poisson"])
def test_a_capacity_step_is_the_plan_the_replay_makes_of_its_command_line(tmp_path: Path, arrival: str) -> None:
    profile = load_profile(None, {"arrival": arrival, "ramp_s": 7.0, "limit": 2})
    target = Target("ws://127.0.0.1:1/xiaozhi/v1/", FIXTURES, (SIMULATOR,), "TOKEN", "", 2, "en", 12.5)
    plan = step_plan(target, profile, 3, tmp_path / "steps" / "3", "ramp-3d")
    assert parsed(plan) == plan
    assert plan.config().fleet.devices == 3 and plan.device.listen_mode == profile.listen_mode


def test_a_sweep_point_is_the_plan_the_replay_makes_of_its_command_line(tmp_path: Path) -> None:
    options = RunOptions(ROOT, FIXTURES, (SIMULATOR,), tmp_path, 2, 1, "virtual", True, 3.0, tmp_path / "cache")
    point = Point("8", "sw-max_tokens-8", {"llm": {"max_tokens": 8}})
    plan = point_plan(point, options, tmp_path / "8.toml")
    assert parsed(plan) == plan
    assert plan.configs == (SIMULATOR, tmp_path / "8.toml")
