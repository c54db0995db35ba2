"""Centralised against distributed: the distributed curve's labels and the crossing's headcount, exactly."""

from __future__ import annotations

import pytest

from pipeline.analysis.crossing import (
    CROSSES,
    ESTIMATED,
    MEASURED,
    NEVER_QUIETER,
    NO_CROSSING,
    Curve,
    CurveError,
    SilenceAt,
    crossing,
    describe,
    distributed,
    headcounts,
)

SHARED = Curve(
    "shared",
    (
        SilenceAt(1, 400.0, 500.0),
        SilenceAt(2, 450.0, 600.0),
        SilenceAt(5, 700.0, 1100.0),
        SilenceAt(10, 1300.0, 2600.0),
    ),
)
DEVICE = distributed(SilenceAt(1, 600.0, 800.0), SHARED.devices)


def test_the_distributed_curve_is_measured_at_one_device_and_estimated_beyond() -> None:
    assert DEVICE.points == (
        SilenceAt(1, 600.0, 800.0, MEASURED),
        SilenceAt(2, 600.0, 800.0, ESTIMATED),
        SilenceAt(5, 600.0, 800.0, ESTIMATED),
        SilenceAt(10, 600.0, 800.0, ESTIMATED),
    )


def test_the_crossing_is_interpolated_between_the_measured_steps_around_it_and_labelled_estimated() -> None:
    p50 = crossing(SHARED, DEVICE, "p50")
    # 450 at 2, 700 at 5: 600 is reached 150/250 of the way from 2 to 5
    assert (p50.kind, p50.devices, p50.label, p50.between) == (CROSSES, 2 + 3 * 150 / 250, ESTIMATED, (2, 5))
    assert p50.reasons == (
        "interpolated between the measured steps 2 and 5",
        "the distributed figure at 5 devices is an estimate: the single-device figure",
    )
    assert p50.quieter_up_to == 3
    p90 = crossing(SHARED, DEVICE, "p90")
    assert (p90.devices, p90.between) == (2 + 3 * 200 / 500, (2, 5))


def test_a_crossing_on_a_measured_step_is_that_step_and_still_estimated_against_an_estimated_figure() -> None:
    shared = Curve("s", (SilenceAt(1, 500.0, 700.0), SilenceAt(4, 600.0, 800.0), SilenceAt(8, 900.0, 1200.0)))
    c = crossing(shared, distributed(SilenceAt(1, 600.0, 800.0), shared.devices), "p90")
    assert (c.devices, c.between, c.label) == (4.0, (4, 4), ESTIMATED)
    assert c.reasons == ("the distributed figure at 4 devices is an estimate: the single-device figure",)
    assert c.quieter_up_to == 3


def test_a_crossing_against_measured_figures_on_a_measured_step_is_measured() -> None:
    shared = Curve("s", (SilenceAt(1, 500.0, 700.0), SilenceAt(2, 600.0, 800.0)))
    device = Curve("d", (SilenceAt(1, 600.0, 800.0), SilenceAt(2, 600.0, 800.0)))
    c = crossing(shared, device, "p50")
    assert (c.devices, c.label, c.reasons) == (2.0, MEASURED, ())


def test_a_shared_llm_quieter_at_every_step_has_no_crossing_within_the_measured_range() -> None:
    c = crossing(SHARED, distributed(SilenceAt(1, 5000.0, 5000.0), SHARED.devices), "p90")
    assert (c.kind, c.devices, c.label, c.quieter_up_to) == (NO_CROSSING, None, "", 10)
    assert (
        describe(c, "the cloud") == "P90: no crossing within the measured range; the cloud is quieter up to 10 devices."
    )


def test_a_shared_llm_no_quieter_from_the_first_step_never_crosses() -> None:
    c = crossing(SHARED, distributed(SilenceAt(1, 400.0, 450.0), SHARED.devices), "p50")
    assert (c.kind, c.devices, c.quieter_up_to) == (NEVER_QUIETER, None, None)
    assert describe(c, "the hub") == "P50: the hub is no quieter than a device's own LLM from the first measured step."


def test_the_first_step_reaching_the_figure_counts_even_if_a_later_one_dips_below() -> None:
    shared = Curve("s", (SilenceAt(1, 100.0, 100.0), SilenceAt(2, 700.0, 700.0), SilenceAt(3, 100.0, 100.0)))
    c = crossing(shared, distributed(SilenceAt(1, 400.0, 400.0), shared.devices), "p50")
    assert (c.devices, c.between) == (1.5, (1, 2))


def test_describe_names_the_headcount_and_its_label_with_the_reasons() -> None:
    text = describe(crossing(SHARED, DEVICE, "p50"), "the emulated cloud")
    assert text == (
        "P50: the emulated cloud reaches a device's own LLM at 3.8 devices (estimated: interpolated between the "
        "measured steps 2 and 5; the distributed figure at 5 devices is an estimate: the single-device figure)."
    )


@pytest.mark.parametrize(
    ("points", "message"),
    [
        ((), r"c: no step with a silence figure"),
        ((SilenceAt(2, 1.0, 1.0), SilenceAt(2, 1.0, 1.0)), r"c: 2 devices after 2: steps must increase"),
        ((SilenceAt(0, 1.0, 1.0),), r"c: 0 devices after 0"),
        ((SilenceAt(1, -1.0, 1.0),), r"c, 1 devices: silence -1.0/1.0 ms is not >= 0"),
        ((SilenceAt(1, 1.0, float("nan")),), r"c, 1 devices: silence 1.0/nan ms is not >= 0"),
        ((SilenceAt(1, 1.0, 1.0, "guessed"),), r"c, 1 devices: label 'guessed' is neither measured nor estimated"),
    ],
)
def test_a_curve_that_cannot_be_read_is_refused_naming_the_step(points: tuple[SilenceAt, ...], message: str) -> None:
    with pytest.raises(CurveError, match=message):
        Curve("c", points)


def test_the_distributed_figure_must_be_the_measured_single_device_one() -> None:
    with pytest.raises(CurveError, match="the one measured with 1 device"):
        distributed(SilenceAt(2, 1.0, 1.0), (1, 2))
    with pytest.raises(CurveError, match="the one measured with 1 device"):
        distributed(SilenceAt(1, 1.0, 1.0, ESTIMATED), (1, 2))


def test_a_distributed_curve_without_a_shared_step_is_refused_naming_it() -> None:
    with pytest.raises(CurveError, match=r"d: no figure at 5 devices, where shared was measured"):
        crossing(SHARED, Curve("d", (SilenceAt(1, 1.0, 1.0), SilenceAt(2, 1.0, 1.0))), "p50")


def test_headcounts_are_every_curves_steps_once_increasing() -> None:
    assert headcounts([SHARED, Curve("h", (SilenceAt(1, 1.0, 1.0), SilenceAt(3, 1.0, 1.0)))]) == (1, 2, 3, 5, 10)
