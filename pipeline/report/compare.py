"""The comparison's shared figures: a quantile with its interval (``Stat``), the difference of two
conditions' quantiles with the interval of that difference (``Diff``), the same-question paired
difference, and success rates.

Everything is computed over measured (non-warm-up), successful turns; each figure carries
how many turns it was computed over and how many measured turns there were (M7).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.analysis.bootstrap import Interval, difference_interval, quantile_interval
from pipeline.analysis.numbers import quantile
from pipeline.report.conditions import Condition


@dataclass(frozen=True, slots=True)
class Stat:
    """A quantile of a metric with its 95 % interval, over ``n`` of ``turns`` measured turns."""

    value: float | None
    interval: Interval | None
    n: int
    turns: int

    @property
    def partial(self) -> bool:
        return self.n < self.turns


@dataclass(frozen=True, slots=True)
class Diff:
    """quantile(x) - quantile(base), with the interval of that difference."""

    value: float | None
    interval: Interval | None
    base: float | None

    @property
    def percent(self) -> float | None:
        if self.value is None or not self.base:
            return None
        return 100.0 * self.value / self.base

    @property
    def real(self) -> bool:
        return self.interval is not None and self.interval.excludes_zero()


def stat_of(sorted_values: np.ndarray, q: float, name: str, turns: int) -> Stat:
    if len(sorted_values) == 0:
        return Stat(None, None, 0, turns)
    return Stat(quantile(sorted_values, q), quantile_interval(sorted_values, q, name), len(sorted_values), turns)


def stat(cond: Condition, metric: str, q: float = 0.5) -> Stat:
    return stat_of(cond.values(metric), q, f"{cond.label}|{metric}", len(cond.measured))


def diff_of(x: np.ndarray, x_name: str, base: np.ndarray, base_name: str, q: float) -> Diff:
    if len(x) == 0 or len(base) == 0:
        return Diff(None, None, quantile(base, q) if len(base) else None)
    b = quantile(base, q)
    return Diff(quantile(x, q) - b, difference_interval(x, x_name, base, base_name, q), b)


def diff(x: Condition, base: Condition, metric: str, q: float = 0.5) -> Diff:
    return diff_of(x.values(metric), f"{x.label}|{metric}", base.values(metric), f"{base.label}|{metric}", q)


def paired(x: Condition, base: Condition, metric: str) -> Stat:
    """Median of per-turn differences x - base, turns matched by (question, round): the same question
    set and order in both conditions (M5) makes each pair differ only in the condition."""
    mine, theirs = x.matched(base)
    xs, bs = x.column(metric)[mine], base.column(metric)[theirs]
    both = ~(np.isnan(xs) | np.isnan(bs))  # pairs where either turn has no value are left out
    values = np.sort(xs[both] - bs[both])
    return stat_of(values, 0.5, f"{x.label}-{base.label}|paired|{metric}", max(len(x.measured), len(base.measured)))


def success(cond: Condition) -> tuple[int, int]:
    return len(cond.ok), len(cond.measured)


def success_percent(cond: Condition) -> float | None:
    ok, measured = success(cond)
    return 100.0 * ok / measured if measured else None
