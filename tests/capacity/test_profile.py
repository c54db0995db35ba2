"""The capacity ramp's load profile: read from TOML and the command line, checked, and entered in config_id."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pipeline.capacity.profile import LoadProfile, ProfileError, load_profile
from pipeline.settings.config import Config


def config_id(profile: LoadProfile, devices: int = 1) -> str:
    """A step's identity as the ramp makes it: the arrival in [fleet], the whole profile beside the models."""
    fleet = profile.arrival_settings(devices)
    cfg = Config()
    cfg = dataclasses.replace(cfg, fleet=dataclasses.replace(cfg.fleet, **fleet))
    return cfg.config_id("questions", {"load_profile": profile.identity()})


def test_defaults_and_toml_then_command_line(tmp_path: Path) -> None:
    assert load_profile(None, {}) == LoadProfile()
    assert LoadProfile().listen_mode == "realtime" and LoadProfile().think_after(4.0) == 3.0
    path = tmp_path / "p.toml"
    path.write_text('[load]\nlisten_mode = "auto"\nthink_s = 5\nids = ["q1", "q2"]\nseed = 3\n')
    p = load_profile(path, {"think_s": None, "seed": 9, "arrival": "poisson"})
    assert p == LoadProfile(listen_mode="auto", think_s=5.0, ids=("q1", "q2"), seed=9, arrival="poisson")
    assert load_profile(None, {"ids": "a, b"}).ids == ("a", "b")


def test_questions_per_hour_leaves_the_rest_of_each_period_as_think_time() -> None:
    p = LoadProfile(questions_per_hour=120.0)
    assert p.think_after(10.0) == 20.0
    assert p.think_after(45.0) == 0.0  # a turn longer than the period: the next question at once


def test_arrivals_spread_over_the_ramp() -> None:
    assert LoadProfile(arrival="staggered", ramp_s=10).arrival_settings(4) == {
        "devices": 4,
        "arrival": "staggered",
        "seed": 7,
        "gap_ms": 2500.0,
    }
    assert LoadProfile(arrival="poisson", ramp_s=10).arrival_settings(20)["rate_per_s"] == 2.0
    assert "gap_ms" not in LoadProfile(arrival="together").arrival_settings(3)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"think_s": -1.0}, "[load] think_s = -1.0: 0 or more seconds"),
        ({"listen_mode": "manual"}, "[load] listen_mode = 'manual': one of realtime, auto"),
        ({"arrival": "burst"}, "[load] arrival = 'burst': one of together, staggered, poisson"),
        ({"think_s": 1.0, "questions_per_hour": 10.0}, "give one of the two"),
        ({"questions_per_hour": 0.0}, "[load] questions_per_hour = 0.0: more than 0"),
        ({"session_s": -5.0}, "[load] session_s = -5.0"),
        ({"ramp_s": -1.0}, "[load] ramp_s = -1.0"),
        ({"arrival": "poisson", "ramp_s": 0.0}, "poisson arrivals need a ramp time"),
        ({"limit": -2}, "[load] limit = -2"),
        ({"think_s": float("nan")}, "[load] think_s = nan: a finite number"),
        ({"thinking": 3}, "[load] thinking: unknown key"),
    ],
)
def test_impossible_values_are_refused_naming_key_and_value(values: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile(None, values)
    assert message in str(caught.value)


def test_a_bad_profile_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot be read"):
        load_profile(tmp_path / "missing.toml", {})
    (tmp_path / "bad.toml").write_text("[load\n")
    with pytest.raises(ProfileError, match="not TOML"):
        load_profile(tmp_path / "bad.toml", {})
    (tmp_path / "other.toml").write_text("[fleet]\ndevices = 3\n")
    with pytest.raises(ProfileError, match="unknown table"):
        load_profile(tmp_path / "other.toml", {})


def test_every_value_and_the_device_count_change_config_id() -> None:
    base = LoadProfile()
    changed: dict[str, Any] = {
        "listen_mode": "auto",
        "think_s": 7.0,
        "questions_per_hour": 30.0,
        "session_s": 20.0,
        "arrival": "poisson",
        "ramp_s": 4.0,
        "limit": 2,
        "ids": ("q1",),
        "seed": 8,
    }
    assert set(changed) == {f.name for f in dataclasses.fields(LoadProfile)}  # every value is tried
    ids = {config_id(base)}
    for key, value in changed.items():
        ids.add(config_id(dataclasses.replace(base, **{key: value})))
    ids.add(config_id(base, devices=2))
    assert len(ids) == len(changed) + 2
    assert config_id(LoadProfile(think_s=3)) == config_id(load_profile(None, {"think_s": 3}))  # same setting, same id
