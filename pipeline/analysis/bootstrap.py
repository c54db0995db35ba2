"""Bootstrap confidence intervals for medians, P90s and their differences (METHOD M8).

Percentile bootstrap: 95 % intervals from 4,000 resamples of the turns, with a fixed seed.
Every estimate draws from its own generator, seeded from ``SEED`` and the estimate's
name, so a figure does not change when other figures are added to the report.

The resampled quantile is drawn without building the resamples: resampling n sorted
values with replacement is mapping n uniform draws through the empirical quantile
function, which is monotone, so the resample's k-th smallest value is
``x[floor(n * U(k))]`` where ``U(k)``, the k-th smallest of n uniforms, is Beta(k, n-k+1);
the next order statistic is ``U(k) + (1 - U(k)) * Beta(1, n-k)``. Interpolating between
them exactly as ``pipeline.analysis.numbers.quantile`` does gives the same distribution as
resampling, at a cost that does not grow with n (100,000 turns take as long as 10).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

SEED = 20250101
RESAMPLES = 4000
LEVEL = 0.95


@dataclass(frozen=True, slots=True)
class Interval:
    """A 95 % bootstrap interval of an estimate (M8)."""

    low: float
    high: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def generator(name: str) -> np.random.Generator:
    """The estimate's own random generator, seeded from ``SEED`` and its name."""
    return np.random.default_rng([SEED, zlib.crc32(name.encode("utf-8"))])


def resampled_quantiles(
    sorted_values: np.ndarray, q: float, rng: np.random.Generator, resamples: int = RESAMPLES
) -> np.ndarray:
    """The q-quantile of each of ``resamples`` bootstrap resamples (see the module docstring)."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("bootstrap of no values")
    pos = (n - 1) * q
    lo = math.floor(pos)
    frac = pos - lo
    k = lo + 1  # 1-based rank of the lower order statistic
    u_low = rng.beta(k, n - k + 1, size=resamples)
    idx_low = np.minimum((u_low * n).astype(np.int64), n - 1)
    low = sorted_values[idx_low]
    if frac == 0 or k >= n:
        return np.asarray(low, dtype=np.float64)
    u_high = u_low + (1.0 - u_low) * rng.beta(1, n - k, size=resamples)
    idx_high = np.minimum((u_high * n).astype(np.int64), n - 1)
    return np.asarray(low + frac * (sorted_values[idx_high] - low), dtype=np.float64)


def interval(draws: np.ndarray, level: float = LEVEL) -> Interval:
    """The central ``level`` interval of the draws (percentile bootstrap)."""
    tail = (1 - level) / 2
    lo, hi = np.quantile(draws, [tail, 1 - tail])
    return Interval(float(lo), float(hi))


def draws(sorted_values: np.ndarray, q: float, name: str) -> np.ndarray:
    """Bootstrap draws of a quantile, reproducible from ``name`` (e.g. ``"B|first_token_ms|0.5"``)."""
    return resampled_quantiles(sorted_values, q, generator(f"{name}|{q}"))


def quantile_interval(sorted_values: np.ndarray, q: float, name: str) -> Interval | None:
    """95 % interval of a quantile; None with fewer than 2 values (no spread to resample)."""
    if len(sorted_values) < 2:
        return None
    return interval(draws(sorted_values, q, name))


def difference_interval(
    x_sorted: np.ndarray, x_name: str, base_sorted: np.ndarray, base_name: str, q: float
) -> Interval | None:
    """95 % interval of quantile(x) - quantile(base), the two groups resampled independently."""
    if len(x_sorted) < 2 or len(base_sorted) < 2:
        return None
    return interval(draws(x_sorted, q, x_name) - draws(base_sorted, q, base_name))
