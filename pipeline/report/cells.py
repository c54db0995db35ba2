"""How figures are written in table cells: one place, so every table reads the same way.

A latency cell reads ``352.1 [340.2, 360.0] · 8/8``: the value in ms, its 95 % bootstrap
interval, and over how many of the measured turns it was computed. A figure computed over
fewer than all measured turns is marked ``⚠`` (METHOD M7). A cell without data says
``not measured`` and why.
"""

from __future__ import annotations

from pipeline.analysis.bootstrap import Interval
from pipeline.report.compare import Diff, Stat

NOT_MEASURED = "not measured"
PARTIAL = "⚠"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def signed(value: float | None, unit: str = " ms") -> str:
    return "-" if value is None else f"{value:+.1f}{unit}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def interval(ci: Interval | None, sign: bool = False) -> str:
    if ci is None:
        return "[no interval: fewer than 2 values]"
    if sign:
        return f"[{ci.low:+.1f}, {ci.high:+.1f}]"
    return f"[{ci.low:.1f}, {ci.high:.1f}]"


def count(n: int, turns: int) -> str:
    return f"{PARTIAL} {n}/{turns}" if n < turns else f"{n}/{turns}"


def not_measured(n_turns: int, what: str = "turns") -> str:
    if n_turns == 0:
        return f"{NOT_MEASURED} (no measured {what})"
    return f"{NOT_MEASURED} (0 of {n_turns} turns gave a value)"


def stat(s: Stat, with_interval: bool = True) -> str:
    if s.value is None:
        return not_measured(s.turns)
    ci = f" {interval(s.interval)}" if with_interval else ""
    return f"{ms(s.value)}{ci} · {count(s.n, s.turns)}"


def diff(d: Diff) -> str:
    if d.value is None:
        return f"{NOT_MEASURED} (a side has no values)"
    return f"{signed(d.value)} {interval(d.interval, sign=True)}"


def rate(ok: int, measured: int) -> str:
    if measured == 0:
        return f"{NOT_MEASURED} (no measured turns)"
    return f"{ok}/{measured} ({100 * ok / measured:.1f}%)"
