"""Section 4, dilution (M17): the end-to-end change is smaller than the LLM segment's change."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.report import cells
from pipeline.report.compare import Diff, diff
from pipeline.report.conditions import Condition
from pipeline.report.document import NOTE, Block, Bullets, Heading, Paragraph, Table
from pipeline.report.sections import neighbours
from pipeline.report.sections.base import Conditions, Context, Pair

DILUTION_METRICS = (
    ("first_token_ms", "LLM first token (first call)"),
    ("total_ms", "LLM segment (first request to last call's end)"),
    ("whole_turn_ms", "whole turn (end of speech to last audio played)"),
)


def dilution(x: Condition, base: Condition) -> list[tuple[str, str, Diff]]:
    return [(metric, label, diff(x, base, metric)) for metric, label in DILUTION_METRICS]


def _turns(cond: Condition, metric: str) -> str:
    return cells.count(len(cond.values(metric)), len(cond.measured))


def dilution_table(pairs: Sequence[Pair], conds: Conditions) -> Table:
    rows = []
    for x, base in pairs:
        for metric, label, d in dilution(conds[x], conds[base]):
            rows.append(
                (
                    f"{x} - {base}",
                    label,
                    cells.ms(d.base),
                    cells.ms(None if d.value is None or d.base is None else d.base + d.value),
                    cells.diff(d),
                    cells.percent(d.percent),
                    f"{_turns(conds[base], metric)}; {_turns(conds[x], metric)}",
                )
            )
    headers = (
        "comparison",
        "segment",
        "baseline median (ms, measured)",
        "median (ms, measured)",
        "change (ms, measured) [95% interval, estimated]",
        "change (%)",
        "turns (baseline; condition)",
    )
    caption = "Changes are differences of the medians; % of the baseline median; intervals: 95% bootstrap."
    return Table("dilution", headers, tuple(rows), caption)


def dilution_sentence(x: Condition, base: Condition) -> str:
    parts = {metric: d for metric, _label, d in dilution(x, base)}
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


def section(ctx: Context) -> list[Block]:
    out: list[Block] = [Heading(2, "4. Dilution (M17)")]
    if ctx.refused(out):
        return out
    if not ctx.pairs:
        out.append(Paragraph(ctx.no_pairs("Dilution"), NOTE))
        return out
    out.append(dilution_table(ctx.pairs, ctx.conds))
    out.append(Bullets(tuple(dilution_sentence(ctx.conds[x], ctx.conds[b]) for x, b in ctx.pairs)))
    return out + neighbours.section(ctx)
