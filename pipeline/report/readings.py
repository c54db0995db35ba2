"""What the figures say, in words: outcomes (M16), offline check (M13), dilution (M17),
the conclusion with its gain and its cost (M22) and the boundaries (M21)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.report import cells, compare
from pipeline.report.conditions import Condition, number, title
from pipeline.report.document import Table
from pipeline.report.tables import Conditions, Pair

OUTCOME_RULES = (
    f"less reliable = success rate more than {compare.RELIABILITY_POINTS:g} percentage points below A's "
    "(checked first); faster = the 95% interval of the first-token median difference lies below zero; "
    f"clearly slower = more than {100 * compare.CLEARLY_SLOWER:.0f}% slower with the interval above zero; "
    f"slightly slower = anything else (at most {100 * compare.CLEARLY_SLOWER:.0f}% slower, or not shown faster)."
)


def outcome_table(pairs: Sequence[Pair], conds: Conditions) -> Table:
    rows = []
    for x, base in pairs:
        o = compare.outcome(conds[x], conds[base])
        rows.append((f"{x} vs {base}", o.kind, o.reason, o.advice or "-"))
    headers = ("comparison", "outcome (M16)", "evidence", "what to do")
    return Table("outcomes", headers, tuple(rows), OUTCOME_RULES)


def _components(cond: Condition) -> str:
    counts: dict[str, int] = {}
    for stages in cond.failed_stages:
        for stage in stages or ("(no stage span marked failed)",):
            counts[stage] = counts.get(stage, 0) + 1
    return ", ".join(f"{stage} ({n} turn(s))" for stage, n in counts.items()) or "none recorded"


def _errors(cond: Condition) -> str:
    counts: dict[str, int] = {}
    for r in cond.measured:
        if not r.get("ok"):
            key = str(r.get("error") or "unknown")
            counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{e} ({n})" for e, n in sorted(counts.items()))


def offline_reading(conds: Conditions) -> str:
    """M13: does the chain run with the network cut?"""
    if "B'" not in conds or not conds["B'"].measured:
        return "B' (offline) was not measured: that the chain runs fully offline is not shown (M13)."
    off = conds["B'"]
    ok, n = compare.success(off)
    if "B" not in conds or not conds["B"].measured:
        return f"B' (offline) succeeded in {ok}/{n} turns; B (local) was not measured, so the two cannot be compared."
    on_ok, on_n = compare.success(conds["B"])
    off_rate, on_rate = compare.success_percent(off), compare.success_percent(conds["B"])
    if off_rate is not None and on_rate is not None and off_rate < on_rate:
        return (
            f"B works ({on_ok}/{on_n}) and B' fails ({ok}/{n} succeeded): the chain is NOT fully local (M13). "
            f"Failed turns: {_errors(off)}; failed component(s): {_components(off)}."
        )
    return f"B' (offline) succeeded in {ok}/{n} turns, B in {on_ok}/{on_n}: no hidden network dependency showed up."


def dilution_sentence(x: Condition, base: Condition) -> str:
    parts = {metric: d for metric, _label, d in compare.dilution(x, base)}
    seg, whole = parts["total_ms"], parts["whole_turn_ms"]
    if seg.value is None or whole.value is None:
        return f"{x.label} vs {base.label}: dilution cannot be shown (a median is not measured on one side)."
    said = (
        f"{x.label} vs {base.label}: the LLM segment changed by {cells.signed(seg.value)} "
        f"({cells.percent(seg.percent)}), the whole turn by {cells.signed(whole.value)} "
        f"({cells.percent(whole.percent)})"
    )
    if seg.percent is not None and whole.percent is not None and abs(whole.percent) < abs(seg.percent):
        return said + ": the other stages did not change, so the end-to-end change is diluted (M17)."
    return said + ": the whole turn changed as much as the LLM segment or more, so other stages changed too."


def _change_text(change: compare.Change) -> str:
    d = change.diff
    word = "lower" if d.value is not None and d.value < 0 else "higher"
    return f"{change.what} {abs(d.value or 0):.1f} ms {word} ({cells.percent(d.percent)})"


def conclusion(x: Condition, base: Condition, simulated: bool) -> str:
    """One sentence naming the gain and the cost together (M22)."""
    if not x.ok or not base.ok:
        side = x if not x.ok else base
        return (
            f"{title(x.label)} against {title(base.label)}: no latency conclusion, {title(side.label)} has no "
            f"successful measured turn ({cells.rate(*compare.success(side))})."
        )
    b = compare.balance(x, base)
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
        values = [v for r in cond.ok if (v := number(r.get("answer_quality"))) is not None]
        if values:
            parts.append(f"{label} {float(np.median(values)):.2f}")
    if not parts:
        return "answer quality was not scored in these runs"
    return "measured answer quality (share of expected keywords found, median): " + ", ".join(parts)


def boundaries(conds: Conditions) -> tuple[str, ...]:
    """M21: always stated with the conclusion."""
    temps = [f"{label}: {_temp(cond)}" for label, cond in conds.items()]
    return (
        "An on-device small model is weaker than a cloud 70B-class model; capability loss does not show in "
        f"latency figures ({_quality(conds)}).",
        "On-device TTS voice quality is usually below cloud TTS; these figures do not measure voice quality.",
        "Concurrency capacity is a trade-off between a centralised and a distributed architecture, not "
        "better or worse; these runs had a single client, which never sees queueing (M19).",
        "On-device performance depends on temperature; temperature during these runs: "
        + ("; ".join(temps) or "-")
        + ".",
    )


def _temp(cond: Condition) -> str:
    temps = [v for r in cond.measured if (v := number(r.get("temp_c"))) is not None]
    if not temps:
        return "not recorded (no sensor), so these figures hold for an unknown temperature"
    return f"{min(temps):.1f}-{max(temps):.1f} °C"
