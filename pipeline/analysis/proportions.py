"""A share of turns (how many of n) with its 95 % interval: the Wilson score interval.

A share such as the cut-off rate (questions whose end-point came before the user finished, of those with a
truth) is a binomial proportion, and a run asks few questions: the normal ("Wald") interval is too narrow
there and says nothing at 0 of n. The Wilson score interval stays inside [0, 1], is not empty at 0 or n of n,
and keeps close to its nominal coverage at small n (Brown, Cai and DasGupta 2001, "Interval estimation for a
binomial proportion", Statistical Science 16(2): 101-133). It is a formula, not a resampling: no seed, and
the same counts always give the same interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile: a two-sided 95 % interval


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` of ``n`` (Wilson 1927, "Probable inference, the law of
    succession, and statistical inference", JASA 22(158): 209-212):

    ``(p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)``, with ``p = successes / n``.

    At 0 of n the low end is exactly 0 and at n of n the high end exactly 1, as the formula gives them
    (rounding would leave a trace of a digit there)."""
    if n <= 0:
        raise ValueError("a share of no turns has no interval")
    if not 0 <= successes <= n:
        raise ValueError(f"{successes} of {n}: a share is between 0 and n")
    p = successes / n
    z2 = z * z
    scale = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / scale
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / scale
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True, slots=True)
class Proportion:
    """``successes`` of ``n`` turns, with its 95 % Wilson score interval (``low``, ``high``: shares, 0-1)."""

    successes: int
    n: int
    low: float
    high: float

    @property
    def share(self) -> float:
        return self.successes / self.n

    def overlaps(self, other: Proportion) -> bool:
        """Whether the two intervals share a point (touching ends count as overlapping)."""
        return self.low <= other.high and other.low <= self.high


def proportion(successes: int, n: int) -> Proportion:
    """``successes`` of ``n`` with its interval (``wilson_interval``); ``n`` must be positive."""
    low, high = wilson_interval(successes, n)
    return Proportion(successes, n, low, high)
