"""The one derivation of the few things every figure rests on: a row, a measured turn, a quantile.

Imported wherever they are needed (rows, statistics, summary, report), so no two figures can
disagree about which turns count or how a median is taken.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Row = dict[str, str | int | float | None]


def measured(row: Row) -> bool:
    """A turn that counts in statistics: anything but the warm-up round (M6). Failed turns count too (M7)."""
    return not row.get("warmup")


def measured_ok(row: Row) -> bool:
    """A measured turn that succeeded: the turns latency figures are computed from."""
    return not row.get("warmup") and bool(row.get("ok"))


def quantile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The ``q``-quantile, linear interpolation between closest ranks (numpy's default); any order."""
    if len(values) == 0:
        raise ValueError("quantile of no values")
    return float(np.quantile(values, q))


def median(values: Sequence[float] | np.ndarray) -> float:
    return quantile(values, 0.5)
