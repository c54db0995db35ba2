"""Section 1, the result table (M23): filled only from measured rows; an empty cell says so.

It leads with what a person hears, the silence (end of speech -> first audible sound,
``silence``), and, where the report was given rows measured from a recording, the recording's
own figure for the same turns and how far the traces are from it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.analysis.numbers import median
from pipeline.report import cells, compare
from pipeline.report.acoustic_match import Match
from pipeline.report.conditions import Condition, group, number
from pipeline.report.document import NOTE, WARNING, Block, Heading, Paragraph, Table
from pipeline.report.load import Dataset
from pipeline.report.runs import temperatures
from pipeline.report.sections import endpoint_cost
from pipeline.report.sections.base import MEASURED, Conditions, Context, header, row
from pipeline.report.silence import INFERRED_NOTE, inferred, sorted_silences

EVERY = "every figure"
ACOUSTIC = "measured (acoustic: from the recording)"
# not "not measured": a turn without a recording is measured by its traces; the report is not incomplete for it
NOT_RECORDED = "no recording of these turns"
ROW_CHECK = "silence: trace - recording, median / worst (ms)"


def calls_cell(cond: Condition) -> str:
    counts = np.asarray([v for r in cond.ok if (v := number(r.llm_calls)) is not None], dtype=np.float64)
    if len(counts) == 0:
        return cells.not_measured(len(cond.measured))
    return (
        f"mean {counts.mean():.2f} (median {median(counts):g}, {counts.min():g}-{counts.max():g}) · "
        f"{cells.count(len(counts), len(cond.measured))}"
    )


def temperature_cell(cond: Condition) -> str:
    found = temperatures(cond)
    if found is None:
        return f"{cells.NOT_MEASURED} (no sensor reading)"
    return f"{found[0]:.1f}-{found[1]:.1f} °C"


def silence_cell(cond: Condition, q: float) -> str:
    name = f"{cond.label}|silence"
    return cells.stat(compare.stat_of(sorted_silences(cond.ok), q, name, len(cond.measured)))


def _matched_in(cond: Condition, matches: Sequence[Match]) -> list[Match]:
    """The matches whose trace turn is one of the condition's measured successful turns."""
    ok = {id(r) for r in cond.ok}
    return [m for m in matches if id(m.trace) in ok and m.row.ok and m.row.first_audible_ms is not None]


def acoustic_rows(labels: Sequence[str], conds: Conditions, matches: Sequence[Match]) -> tuple[tuple[str, ...], ...]:
    """The recording's silence median over the turns it measured, and the traces' distance from it."""

    def median_cell(cond: Condition) -> str:
        found = _matched_in(cond, matches)
        values = np.sort(np.asarray([m.row.first_audible_ms for m in found], dtype=np.float64))
        if not len(values):
            return NOT_RECORDED
        return cells.stat(compare.stat_of(values, 0.5, f"{cond.label}|acoustic", len(cond.measured)))

    def check_cell(cond: Condition) -> str:
        diffs = [d for m in _matched_in(cond, matches) if (d := m.difference_ms) is not None]
        if not diffs:
            return NOT_RECORDED
        worst = max(diffs, key=abs)
        n = cells.count(len(diffs), len(cond.measured))
        shown = [cells.signed(round(v, 1) + 0.0, "") for v in (median(diffs), worst)]  # +0.0, never -0.0
        return f"{shown[0]} / {shown[1]} · {n}"

    return (
        row("silence median, from the recording (ms)", labels, conds, median_cell, ACOUSTIC),
        row(ROW_CHECK, labels, conds, check_cell, ACOUSTIC),
    )


def result_table(labels: Sequence[str], conds: Conditions, acoustic: Sequence[tuple[str, ...]] = ()) -> Table:
    rows = (
        row("silence median (ms)", labels, conds, lambda c: silence_cell(c, 0.5), MEASURED),
        row("silence P90 (ms)", labels, conds, lambda c: silence_cell(c, 0.9), MEASURED),
        *acoustic,
        row(
            "first-token median (ms)", labels, conds, lambda c: cells.stat(compare.stat(c, "first_token_ms")), MEASURED
        ),
        row(
            "first-token P90 (ms)",
            labels,
            conds,
            lambda c: cells.stat(compare.stat(c, "first_token_ms", 0.9)),
            MEASURED,
        ),
        row("whole-turn median (ms)", labels, conds, lambda c: cells.stat(compare.stat(c, "whole_turn_ms")), MEASURED),
        row("LLM calls per turn", labels, conds, calls_cell, MEASURED),
        row("success rate", labels, conds, lambda c: cells.rate(*compare.success(c)), MEASURED),
        row("temperature range", labels, conds, temperature_cell, MEASURED),
    )
    return Table(
        "result",
        header("metric", labels),
        rows,
        "Silence: end of user speech -> first audible sound, what a person hears. Cells: value [95% bootstrap "
        "interval, estimated] · turns with a value / measured turns (warm-up excluded).",
    )


def _inferred_edges(labels: Sequence[str], conds: Conditions) -> list[Block]:
    """Which conditions' silence and whole turn were inferred from the sound, said under the table."""
    said = [
        f"{label} ({n} of {len(cond.measured)} turns)"
        for label in labels
        if (cond := conds.get(label)) and (n := inferred(cond.measured))
    ]
    if not said:
        return []
    return [Paragraph(f"Inferred, not told: the silence and whole turn of {', '.join(said)}: {INFERRED_NOTE}.", NOTE)]


def section(ctx: Context) -> list[Block]:
    out: list[Block] = [Heading(2, "1. Result (M23)")]
    if not ctx.check.comparable:
        out.append(Paragraph("Comparison refused (M11): see Integrity. Each run alone:", WARNING))
        out.extend(_per_run_tables(ctx.data))
        return out
    matches = ctx.matched()[0]
    table = result_table(ctx.labels, ctx.conds, acoustic_rows(ctx.labels, ctx.conds, matches) if matches else ())
    out.append(table)
    out.extend(endpoint_cost.beside_silence(ctx))  # a condition that also cuts off more users
    out.extend(_inferred_edges(ctx.labels, ctx.conds))
    empty = _not_measured(table)
    if empty:
        count = sum(len(table.rows) if rows == [EVERY] else len(rows) for rows in empty.values())
        ctx.incomplete.append(f"{count} cell(s) of the result table not measured")
        listed = "; ".join(f"{column}: {', '.join(rows)}" for column, rows in empty.items())
        out.append(Paragraph(f"Not measured (left empty, never filled from a cited source): {listed}.", WARNING))
    if any(cells.PARTIAL in cell for r in table.rows for cell in r):
        out.append(
            Paragraph(
                f"{cells.PARTIAL} marks a figure computed over fewer than all measured turns: failed turns "
                "have no latency, so the figure describes the successful turns only (M7).",
                WARNING,
            )
        )
    return out


def _per_run_tables(data: Dataset) -> list[Block]:
    out: list[Block] = []
    by_run: dict[str, list[int]] = {}
    for i, r in enumerate(data.rows):
        by_run.setdefault(r.run_id, []).append(i)
    for run, idx in by_run.items():
        cond = next(iter(group(data.subset(idx)).values()))
        table = result_table([cond.label], {cond.label: cond})
        out.append(Table(f"run-{run}", (f"run {run}", *table.headers[1:]), table.rows, table.caption))
    return out


def _not_measured(table: Table) -> dict[str, list[str]]:
    """Column -> the rows whose cell is not measured (``[EVERY]`` when all are)."""
    out: dict[str, list[str]] = {}
    for i, column in enumerate(table.headers[1:-1], start=1):
        rows = [r[0] for r in table.rows if r[i].startswith(cells.NOT_MEASURED)]
        if rows:
            out[column] = [EVERY] if len(rows) == len(table.rows) else rows
    return out
