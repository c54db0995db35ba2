"""Section 7, uncertainty (M8): every figure with its bootstrap interval, and the differences between conditions."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.report import cells, compare
from pipeline.report.conditions import Condition, title
from pipeline.report.document import NOTE, Block, Heading, Paragraph, Table
from pipeline.report.sections.base import Conditions, Context, Pair

UNCERTAINTY_METRICS = (
    ("first_token_ms", "first token"),
    ("whole_turn_ms", "whole turn"),
    ("total_ms", "LLM segment"),
)


def uncertainty_table(labels: Sequence[str], conds: Conditions) -> Table:
    rows = []
    for c in labels:
        if c not in conds:
            continue
        for metric, name in UNCERTAINTY_METRICS:
            for q, qname in ((0.5, "median"), (0.9, "P90")):
                s = compare.stat(conds[c], metric, q)
                value = cells.ms(s.value) if s.value is not None else cells.not_measured(s.turns)
                ci = cells.interval(s.interval) if s.value is not None else "-"
                rows.append((title(c), f"{name} {qname}", value, ci, cells.count(s.n, s.turns)))
    headers = ("condition", "figure (ms)", "value (measured)", "95% interval (estimated)", "turns")
    return Table("uncertainty", headers, tuple(rows), "Percentile bootstrap over turns, 4000 resamples, fixed seed.")


def _verdict(d: compare.Diff) -> str:
    if d.value is None:
        return cells.NOT_MEASURED
    if d.interval is None:
        return "unknown (fewer than 2 values)"
    return "yes (interval excludes 0)" if d.real else "no (interval includes 0)"


def _paired_cell(x: Condition, base: Condition, metric: str, q: float) -> str:
    if q != 0.5:
        return "-"
    p = compare.paired(x, base, metric)
    if p.value is None:
        return "-"
    return f"{cells.signed(p.value)} {cells.interval(p.interval, sign=True)} ({p.n} pairs)"


def differences_table(pairs: Sequence[Pair], conds: Conditions) -> Table:
    rows = []
    for x, base in pairs:
        for metric, name in UNCERTAINTY_METRICS:
            for q, qname in ((0.5, "median"), (0.9, "P90")):
                d = compare.diff(conds[x], conds[base], metric, q)
                paired = _paired_cell(conds[x], conds[base], metric, q)
                figure = f"{name} {qname}"
                rows.append(
                    (
                        f"{x} - {base}",
                        figure,
                        cells.signed(d.value),
                        cells.interval(d.interval, True),
                        _verdict(d),
                        paired,
                    )
                )
    headers = (
        "comparison",
        "figure",
        "difference (measured)",
        "95% interval (estimated)",
        "real difference?",
        "paired: median of same-question differences [95% interval] (estimated)",
    )
    caption = (
        "The difference of the two conditions' figures resamples both conditions independently; the outcomes and "
        "the conclusion use it. The paired column matches turns by question and round (the same questions in the "
        "same order, M5), which removes the spread between questions: a second view, not used for the readings."
    )
    return Table("differences", headers, tuple(rows), caption)


def section(ctx: Context) -> list[Block]:
    out: list[Block] = [Heading(2, "7. Uncertainty")]
    if ctx.refused(out):
        return out
    if not ctx.conds:
        out.append(Paragraph("Nothing measured.", NOTE))
        return out
    out.append(uncertainty_table(ctx.labels, ctx.conds))
    if ctx.pairs:
        out.append(differences_table(ctx.pairs, ctx.conds))
    return out
