"""The one derivation of the few things every figure rests on: a measured turn, a quantile, a duration in ms.

Imported wherever they are needed (rows, segments, statistics, summary, report), so no two figures
can disagree about which turns count, how a median is taken or how a span becomes milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pipeline.records.turn_row import TurnRow


def measured(row: TurnRow) -> bool:
    """A turn that counts in statistics: anything but the warm-up round (M6). Failed turns count too (M7)."""
    return not row.warmup


def measured_ok(row: TurnRow) -> bool:
    """A measured turn that succeeded: the turns latency figures are computed from."""
    return not row.warmup and bool(row.ok)


def quantile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The ``q``-quantile, linear interpolation between closest ranks (numpy's default); any order."""
    if len(values) == 0:
        raise ValueError("quantile of no values")
    return float(np.quantile(values, q))


def median(values: Sequence[float] | np.ndarray) -> float:
    # A row takes the median of its turn's few sentences: numpy's call costs more than a row's other
    # columns together, so a short list of finite floats gets numpy's own arithmetic here, in Python
    # (linear method: the middle one plus nothing for an odd count, b - (b - a) / 2 for an even one).
    if isinstance(values, (list, tuple)) and 0 < len(values) <= 32 and all(type(v) is float for v in values):
        s: list[float] = sorted(values)
        if -math.inf < s[0] and s[-1] < math.inf and all(v == v for v in s):  # no NaN: sorted() needs order
            n = len(s)
            if n == 1:
                return s[0]
            a, b = s[(n - 1) // 2], s[(n - 1) // 2 + 1]
            # with both 0.0 and -0.0 about, which one lands in the middle is up to numpy's partition
            if (a != 0.0 and b != 0.0) or all(math.copysign(1.0, v) > 0 for v in s if v == 0.0):
                return a + (b - a) * 0.0 if n % 2 else b - (b - a) * 0.5
    return quantile(values, 0.5)


_EXACT_NS = 1 << 50  # below this, ns -> ms by integers is round(ns / 1e6, 3) exactly (see ``ms``)


def ms(start: int | None, end: int | None) -> float | None:
    """The time between two stamps (ns) in ms to the microsecond, None if either is missing.

    ``round((end - start) / 1e6, 3)``, the same float, mostly without ``round`` (a row makes a dozen or so:
    the dearest builtin a row calls). ``round`` rounds the float ``ns / 1e6`` to whole microseconds; for a
    whole number of nanoseconds below ``_EXACT_NS`` whose microseconds are not a tie (ending in 500) that
    float lies too near ``ns / 1e6`` for the rounding to differ, so the microseconds are rounded as
    integers, and divided by 1000 (correctly rounded, as ``round``'s result is)."""
    if start is None or end is None:
        return None
    ns = end - start
    if 0 <= ns < _EXACT_NS and ns % 1000 != 500:
        return (ns + 500) // 1000 / 1000
    return round(ns / 1e6, 3)
