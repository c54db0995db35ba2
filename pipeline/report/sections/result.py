"""Section 1, the result table (M23): filled only from measured rows; an empty cell says so."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.analysis.numbers import median
from pipeline.report import cells, compare
from pipeline.report.conditions import Condition, group, number
from pipeline.report.document import WARNING, Block, Heading, Paragraph, Table
from pipeline.report.load import Dataset
from pipeline.report.runs import temperatures
from pipeline.report.sections.base import MEASURED, Conditions, Context, header, row

EVERY = "every figure"


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


def result_table(labels: Sequence[str], conds: Conditions) -> Table:
    rows = (
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
        "Cells: value [95% bootstrap interval, estimated] · turns with a value / measured turns (warm-up excluded).",
    )


def section(ctx: Context) -> list[Block]:
    out: list[Block] = [Heading(2, "1. Result (M23)")]
    if not ctx.check.comparable:
        out.append(Paragraph("Comparison refused (M11): see Integrity. Each run alone:", WARNING))
        out.extend(_per_run_tables(ctx.data))
        return out
    table = result_table(ctx.labels, ctx.conds)
    out.append(table)
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
