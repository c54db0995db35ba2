"""The soak's drift checks (M20) on windows made by hand: exact verdicts, the warm-up window of the server's
levels, and the Theil-Sen slope held to scipy's."""

from __future__ import annotations

import pytest
from scipy.stats import theilslopes

from pipeline.capacity import soak_drift
from pipeline.records.ramp_result import Quantiles
from pipeline.records.soak_result import DriftCheck, SoakWindow

NO_FAILURES = {"no_answer": 0, "cut_connection": 0, "refused": 0, "other": 0}


def window(i: int, p50: float, ci: tuple[float, float], rss: tuple[float, float] | None = None) -> SoakWindow:
    """Window ``i`` of 300 s, its silence P50 (the P90 100 ms above, same interval width) and RSS samples."""
    q = Quantiles(p50, p50 + 100, None, ci, (ci[0] + 100, ci[1] + 100))
    lo, hi = rss if rss is not None else (None, None)
    return SoakWindow(i, 300.0 * (i - 1), 300.0 * i, 40, NO_FAILURES, q, 1.0, 50.0, lo, hi, 30, 5, 1.0, None, None)


def by_figure(windows: list[SoakWindow]) -> dict[str, DriftCheck]:
    return {c.figure: c for c in soak_drift.checks(windows)}


def test_a_silence_that_rises_beyond_the_first_windows_interval_is_flagged() -> None:
    windows = [window(i, 1000 + 40 * (i - 1), (950 + 40 * (i - 1), 1050 + 40 * (i - 1))) for i in range(1, 7)]
    found = by_figure(windows)
    p50 = found["silence_p50_ms"]
    # the last window's interval [1150, 1250] lies above the first's upper 1050, and each window is higher
    assert p50.flagged and p50.first == 1000 and p50.last == 1200 and p50.rho == 1.0
    assert p50.per_hour == pytest.approx(40 / 300 * 3600)  # 40 ms a window of 300 s: 480 ms an hour
    assert found["silence_p90_ms"].flagged
    assert soak_drift.verdict(list(found.values())) == (
        "drifted: silence_p50_ms, silence_p90_ms rose across the windows (M20)"
    )


def test_a_rise_inside_the_first_windows_interval_is_not_drift() -> None:
    windows = [window(i, 1000 + 10 * (i - 1), (900 + 10 * (i - 1), 1100 + 10 * (i - 1))) for i in range(1, 7)]
    p50 = by_figure(windows)["silence_p50_ms"]
    assert not p50.flagged and p50.reason.startswith("stayed within the first window's interval")  # 950 <= 1100


def test_one_late_jump_that_is_not_a_trend_is_not_drift() -> None:
    values = [1000, 1200, 990, 1180, 995, 1150]  # up and down: the last is high, the windows do not rise in order
    windows = [window(i, v, (v - 20, v + 20)) for i, v in enumerate(values, start=1)]
    p50 = by_figure(windows)["silence_p50_ms"]
    assert p50.rho is not None and p50.rho < soak_drift.RHO_FLAG
    assert not p50.flagged and "not rising across windows" in p50.reason


def test_the_servers_memory_is_judged_after_its_warm_up_window() -> None:
    silence = (950.0, 1050.0)
    # the first window fills the server's buffers (300 -> 340 MiB); then it stays level: no drift
    level = [(300, 340), (340, 342), (340, 343), (341, 342), (340, 342)]
    rss = by_figure([window(i, 1000, silence, r) for i, r in enumerate(level, start=1)])["rss_mb"]
    assert not rss.flagged and rss.first == 342  # the second window is the baseline
    # growing all through, its least sample of the last window above the most of the second: flagged
    growing = [(300, 340), (340, 350), (351, 360), (361, 370), (371, 380)]
    rss = by_figure([window(i, 1000, silence, r) for i, r in enumerate(growing, start=1)])["rss_mb"]
    assert rss.flagged and (rss.first, rss.last) == (350, 380)
    assert rss.reason == "rose: the last window's 371 > the first's upper 350 MiB, rho 1.00"


def test_too_few_windows_are_not_checked() -> None:
    found = soak_drift.checks([window(1, 1000, (990, 1010)), window(2, 2000, (1990, 2010))])
    assert not any(c.flagged for c in found)
    assert found[0].reason == "not checked: 2 window(s) hold it, fewer than 3"
    assert soak_drift.verdict(found) == "not checked: too few windows"


def test_theil_sen_is_scipys() -> None:
    at = [150.0, 450.0, 750.0, 1050.0, 1350.0]
    values = [10.0, 14.0, 13.0, 20.0, 18.0]
    assert soak_drift.theil_sen_per_hour(at, values) == pytest.approx(theilslopes(values, at)[0] * 3600)
    assert soak_drift.theil_sen_per_hour([1.0], [2.0]) is None
