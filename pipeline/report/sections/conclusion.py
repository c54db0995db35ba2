"""The conclusion names the gain and the cost together (M22); the boundaries are always stated (M21)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.analysis.numbers import median
from pipeline.report import cells
from pipeline.report.compare import Diff, diff, success, success_percent
from pipeline.report.conditions import Condition, number, title
from pipeline.report.sections.base import Conditions

CONCLUSION_METRICS = (
    ("first_token_ms", 0.5, "first token (median)"),
    ("first_token_ms", 0.9, "first-token P90 (jitter and tail)"),
    ("total_ms", 0.5, "LLM segment (median)"),
    ("total_ms", 0.9, "LLM-segment P90"),
    ("whole_turn_ms", 0.5, "whole turn (median)"),
    ("whole_turn_ms", 0.9, "whole-turn P90"),
)


@dataclass(frozen=True, slots=True)
class FigureChange:
    """One figure's difference between two conditions, named."""

    what: str
    diff: Diff


@dataclass(frozen=True, slots=True)
class Balance:
    """What a condition gains and costs against the baseline, and what stays unclear."""

    gains: tuple[FigureChange, ...]
    costs: tuple[FigureChange, ...]
    unclear: tuple[FigureChange, ...]
    success_change: float | None  # percentage points, x - base


def balance(x: Condition, base: Condition) -> Balance:
    gains, costs, unclear = [], [], []
    for metric, q, label in CONCLUSION_METRICS:
        d = diff(x, base, metric, q)
        if d.value is None:
            continue
        change = FigureChange(label, d)
        if d.real and d.value < 0:
            gains.append(change)
        elif d.real and d.value > 0:
            costs.append(change)
        else:
            unclear.append(change)
    xr, br = success_percent(x), success_percent(base)
    return Balance(tuple(gains), tuple(costs), tuple(unclear), xr - br if xr is not None and br is not None else None)


def _change_text(change: FigureChange) -> str:
    d = change.diff
    word = "lower" if d.value is not None and d.value < 0 else "higher"
    return f"{change.what} {abs(d.value or 0):.1f} ms {word} ({cells.percent(d.percent)})"


def conclusion(x: Condition, base: Condition, simulated: bool) -> str:
    """One sentence naming the gain and the cost together (M22)."""
    if not x.ok or not base.ok:
        side = x if not x.ok else base
        return (
            f"{title(x.label)} against {title(base.label)}: no latency conclusion, {title(side.label)} has no "
            f"successful measured turn ({cells.rate(*success(side))})."
        )
    b = balance(x, base)
    gains = [_change_text(c) for c in b.gains]
    costs = [_change_text(c) for c in b.costs]
    if b.success_change is not None and b.success_change > 0:
        gains.append(f"success rate {b.success_change:+.1f} points")
    if b.success_change is not None and b.success_change < 0:
        costs.append(f"success rate {b.success_change:+.1f} points")
    gain = "; ".join(gains) or "none shown by these figures"
    cost = "; ".join(costs) or "none shown in latency or success (see the boundaries below)"
    text = f"{title(x.label)} against {title(base.label)}: gain: {gain}. Cost: {cost}."
    if b.unclear:
        unclear = ", ".join(
            f"{c.what} {cells.signed(c.diff.value)} ({cells.percent(c.diff.percent)})" for c in b.unclear
        )
        text += f" Not distinguishable from no change (95% interval includes zero): {unclear}."
    if simulated:
        text += " (Simulated stages: this describes the simulator's settings, not real models.)"
    return text


def _quality(conds: Conditions) -> str:
    parts = []
    for label, cond in conds.items():
        values = [v for r in cond.ok if (v := number(r.answer_quality)) is not None]
        if values:
            parts.append(f"{label} {median(values):.2f}")
    if not parts:
        return "answer quality was not scored in these runs"
    return "measured answer quality (share of expected keywords found, median): " + ", ".join(parts)


CONCURRENCY_IN_WORDS = (
    "Concurrency capacity is a trade-off between a centralised and a distributed architecture, not "
    "better or worse; these runs had a single client, which never sees queueing (M19)."
)


def boundaries(conds: Conditions, concurrency: str | None = None) -> tuple[str, ...]:
    """M21: always stated with the conclusion; the third (concurrency) with its figures when a centralised
    against distributed measurement is among the inputs (``centralised.boundary``), in words otherwise."""
    temps = [f"{label}: {_temp(cond)}" for label, cond in conds.items()]
    return (
        "An on-device small model is weaker than a cloud 70B-class model; capability loss does not show in "
        f"latency figures ({_quality(conds)}).",
        "On-device TTS voice quality is usually below cloud TTS; these figures do not measure voice quality.",
        concurrency or CONCURRENCY_IN_WORDS,
        "On-device performance depends on temperature; temperature during these runs: "
        + ("; ".join(temps) or "-")
        + ".",
    )


def _temp(cond: Condition) -> str:
    temps = [v for r in cond.measured if (v := number(r.temp_c)) is not None]
    if not temps:
        return "not recorded (no sensor), so these figures hold for an unknown temperature"
    return f"{min(temps):.1f}-{max(temps):.1f} °C"
