"""The Wilson score interval: known values, the ends at 0 and n of n, and scipy's as the reference."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from pipeline.analysis.proportions import Z95, Proportion, proportion, wilson_interval


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        (5, 10, 0.2366, 0.7634),  # the textbook case: symmetric about one half
        (1, 10, 0.0179, 0.4042),
        (2, 10, 0.0567, 0.5098),
        (3, 7, 0.1582, 0.7495),
        (0, 10, 0.0, 0.2775),  # z² / (n + z²)
        (10, 10, 0.7225, 1.0),
    ],
)
def test_known_wilson_intervals(successes: int, n: int, low: float, high: float) -> None:
    found = wilson_interval(successes, n)
    assert (round(found[0], 4), round(found[1], 4)) == (low, high)


def test_none_and_all_of_n_end_exactly_at_zero_and_one() -> None:
    assert wilson_interval(0, 3)[0] == 0.0
    assert wilson_interval(3, 3)[1] == 1.0
    assert wilson_interval(0, 10)[1] == pytest.approx(Z95**2 / (10 + Z95**2), abs=1e-15)


@pytest.mark.parametrize("n", [1, 2, 5, 13, 40, 200])
def test_the_interval_is_scipys_wilson_interval(n: int) -> None:
    for successes in range(n + 1):
        ours = wilson_interval(successes, n)
        theirs = binomtest(successes, n).proportion_ci(0.95, method="wilson")
        assert ours == pytest.approx((theirs.low, theirs.high), abs=1e-12)


def test_a_share_of_no_turns_or_beyond_n_is_refused() -> None:
    with pytest.raises(ValueError, match="no turns"):
        wilson_interval(0, 0)
    with pytest.raises(ValueError, match="between 0 and n"):
        wilson_interval(4, 3)


def test_overlap_counts_touching_ends() -> None:
    few, many = proportion(0, 40), proportion(20, 40)
    assert few.share == 0.0 and many.share == 0.5
    assert not few.overlaps(many) and not many.overlaps(few)
    assert proportion(1, 4).overlaps(proportion(3, 4))
    touching = Proportion(1, 2, few.high, 0.9)
    assert touching.overlaps(few) and few.overlaps(touching)
