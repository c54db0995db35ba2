"""Whether a soak drifted (METHOD M20: latency that rises over a long run is flagged), from its windows alone.

A figure **drifted** when both hold:

- it rose beyond the first window's interval: the last window's lower bound is above the first window's
  upper bound. For the silence percentiles those are the windows' 95 % bootstrap intervals (what a
  percentile could have read by chance); for the server's RSS, descriptors and threads, sampled through
  each window, the last window's *least* sample must exceed the most the first sampled (memory that came
  back down to the first window's level by the end did not grow). For these three the "first" window is
  the second one: the first holds the server's warm-up (its buffers, pools and caches filling as the
  devices arrive: the lab's server grew 73 -> 75 MiB in a soak's first 40 s and then stayed level);
- it rose *across* the windows, not in one jump back and forth: Spearman's rank correlation of the
  windows' values with their order is at least ``RHO_FLAG``, the same bar as the run drift check's
  (``pipeline.report.drift``).

With fewer than ``MIN_WINDOWS`` windows holding the figure the check is not made, and says so. Each check
also gives the Theil-Sen slope (the median of the slopes between every two windows) in the figure's unit
per hour: how fast, whether flagged or not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pipeline.analysis.stats import spearman
from pipeline.records.soak_result import DriftCheck, SoakWindow

MIN_WINDOWS = 3
RHO_FLAG = 0.5  # pipeline.report.drift's bar for a rank correlation with run order

Pick = Callable[[SoakWindow], "tuple[float | None, float | None, float | None]"]  # (value, lower, upper)


def theil_sen_per_hour(at_s: Sequence[float], values: Sequence[float]) -> float | None:
    """The median of the slopes between every two windows, per hour; None with fewer than two."""
    slopes = [
        (values[j] - values[i]) / (at_s[j] - at_s[i])
        for i in range(len(values))
        for j in range(i + 1, len(values))
        if at_s[j] != at_s[i]
    ]
    return float(np.median(slopes)) * 3600 if slopes else None


def _silence(key: str) -> Pick:
    def pick(w: SoakWindow) -> tuple[float | None, float | None, float | None]:
        value = getattr(w.silence_ms, key)
        ci = getattr(w.silence_ms, f"{key}_ci")
        return value, value if ci is None else ci[0], value if ci is None else ci[1]

    return pick


def _level(low: str, high: str) -> Pick:
    def pick(w: SoakWindow) -> tuple[float | None, float | None, float | None]:
        lo, hi = getattr(w, low), getattr(w, high)
        return hi, lo, hi

    return pick


# (figure, unit, how to read it, the windows left out at the start as warm-up)
CHECKS: tuple[tuple[str, str, Pick, int], ...] = (
    ("silence_p50_ms", "ms", _silence("p50"), 0),
    ("silence_p90_ms", "ms", _silence("p90"), 0),
    ("rss_mb", "MiB", _level("rss_min_mb", "rss_max_mb"), 1),
    ("fds", "descriptors", _level("fds_max", "fds_max"), 1),
    ("threads", "threads", _level("threads_max", "threads_max"), 1),
)


def check(figure: str, unit: str, windows: Sequence[SoakWindow], pick: Pick) -> DriftCheck:
    """One figure's drift over the windows that hold it (the first of them its baseline)."""
    at: list[float] = []
    values: list[float] = []
    bounds: list[tuple[float, float]] = []
    for w in windows:
        value, lower, upper = pick(w)
        if value is not None and lower is not None and upper is not None:
            at.append((w.start_s + w.end_s) / 2)
            values.append(float(value))
            bounds.append((float(lower), float(upper)))
    if len(values) < MIN_WINDOWS:
        why = f"not checked: {len(values)} window(s) hold it, fewer than {MIN_WINDOWS}"
        return DriftCheck(figure, False, None, None, None, None, why)
    first_upper, last_lower = bounds[0][1], bounds[-1][0]
    rho = spearman(np.arange(len(values), dtype=np.float64), np.asarray(values))
    slope = theil_sen_per_hour(at, values)
    beyond = last_lower > first_upper
    rising = rho is not None and rho >= RHO_FLAG
    flagged = beyond and rising
    said_rho = "-" if rho is None else f"{rho:.2f}"
    if flagged:
        why = f"rose: the last window's {last_lower:g} > the first's upper {first_upper:g} {unit}, rho {said_rho}"
    elif not beyond:
        why = f"stayed within the first window's interval (last {last_lower:g} <= upper {first_upper:g} {unit})"
    else:
        why = f"above the first window's interval but not rising across windows (rho {said_rho} < {RHO_FLAG:g})"
    first, last = values[0], values[-1]
    return DriftCheck(figure, flagged, first, last, rho, None if slope is None else round(slope, 3), why)


def checks(windows: Sequence[SoakWindow]) -> list[DriftCheck]:
    """Every figure's check, in ``CHECKS``' order."""
    return [check(figure, unit, windows[skip:], pick) for figure, unit, pick, skip in CHECKS]


def verdict(found: Sequence[DriftCheck]) -> str:
    """The drift in words: which figures drifted, or that none did (and how many were checked)."""
    flagged = [c.figure for c in found if c.flagged]
    made = [c for c in found if not c.reason.startswith("not checked")]
    if flagged:
        return "drifted: " + ", ".join(flagged) + " rose across the windows (M20)"
    if not made:
        return "not checked: too few windows"
    return f"no drift: {len(made)} figure(s) checked, none rose beyond the first window's interval"
