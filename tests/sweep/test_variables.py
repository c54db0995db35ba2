"""The ``endpoint`` variable: an end-of-turn detector and its wait written as one value, and the frontier preset."""

from __future__ import annotations

import pytest

from pipeline.settings.config import load_config
from pipeline.sweep.points import make_plan, parse_vary
from pipeline.sweep.variables import FRONTIER, SweepError, endpoint_section, get_variable, overrides
from tests.paths import REPO_ROOT

SIMULATOR = REPO_ROOT / "configs" / "simulator.toml"


@pytest.mark.parametrize(
    ("value", "section"),
    [
        ("silero@400", {"impl": "silero", "silence_ms": 400}),
        ("silero", {"impl": "silero"}),
        ("silero:xiaozhi-server", {"impl": "silero", "profile": "xiaozhi-server"}),
        (
            "silero:xiaozhi-server@700",
            {"impl": "silero", "profile": "xiaozhi-server", "xiaozhi_server": {"silence_ms": 700}},
        ),
        ("ten@300", {"impl": "ten", "silence_ms": 300}),
        ("smart-turn@200", {"impl": "smart-turn", "inner_silence_ms": 200}),
    ],
)
def test_an_endpoint_value_is_the_whole_vad_section_it_names(value: str, section: dict[str, object]) -> None:
    assert endpoint_section(value) == section
    assert overrides(get_variable("endpoint"), value, load_config([SIMULATOR])) == {"vad": section}


@pytest.mark.parametrize("value", ["Silero@200", "silero@", "silero@2x", "@200", "silero:@200"])
def test_a_value_that_names_no_detector_is_refused_with_the_form_to_write(value: str) -> None:
    with pytest.raises(SweepError, match=r"IMPL\[:PROFILE\]\[@MS\]"):
        parse_vary([f"endpoint={value},silero@600"])


def test_the_frontier_preset_is_every_setting_of_the_frontier_in_order() -> None:
    variable, values = parse_vary(["endpoint=frontier"])
    assert (variable.name, tuple(values)) == ("endpoint", FRONTIER)
    plan = make_plan("s", variable, values, load_config([SIMULATOR]))
    assert [p.run_id for p in plan.points][:2] == ["s-endpoint-silero_200", "s-endpoint-silero_400"]
    assert variable.settings == ("vad.*",)


def test_each_points_settings_are_read_as_the_replay_reads_them() -> None:
    """A point's [vad] replaces the base's: the energy VAD's own keys do not reach Silero or TEN."""
    base = load_config([SIMULATOR])
    assert base.vad.impl == "energy"
    variable = get_variable("endpoint")
    for value, impl in [("silero@400", "silero"), ("ten@300", "ten"), ("smart-turn@200", "smart-turn")]:
        assert load_config([SIMULATOR], overrides=overrides(variable, value, base)).vad.impl == impl
