"""The one derivation of the few things every figure rests on: a row, a measured turn, a quantile.

Imported wherever they are needed (rows, statistics, summary, report), so no two figures can
disagree about which turns count or how a median is taken.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pipeline.analysis.columns import TurnRow

Row = TurnRow  # the name the statistics and the report give a turn's record


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
