"""Section 8, the plots: CDFs, a representative turn's waterfall per condition, latency against run order
(with temperature, M20), per-sentence box plots."""

from __future__ import annotations

from pipeline.report import plots
from pipeline.report.conditions import rows_by_run, title
from pipeline.report.document import NOTE, Block, Figure, Heading, Paragraph
from pipeline.report.sections.base import Context
from pipeline.report.waterfall import Waterfall, bars, representative


def section(ctx: Context) -> list[Block]:
    out: list[Block] = [Heading(2, "8. Plots")]
    if not ctx.draw:
        out.append(Paragraph("Plots were not drawn (--no-plots).", NOTE))
        return out
    if not ctx.data.rows:
        out.append(Paragraph("Nothing to plot: no turns.", NOTE))
        return out
    conds = [c for c in ctx.conds.values() if c.measured]
    if ctx.check.comparable:
        out.append(
            Figure("cdf", plots.cdf_plot(conds), "CDFs of first token and whole turn per condition.", "CDF plots")
        )
        out.extend(_waterfalls(ctx))
    by_run = rows_by_run(ctx.data.rows)  # one pass, not one a run: a fleet's rows are many
    runs = [(f.run_id, f.condition, by_run.get(f.run_id, [])) for f in ctx.run_summaries]
    out.append(
        Figure(
            "order",
            plots.order_plot(runs, ctx.labels, ctx.drifts),
            "Latency against run order per run, with temperature where recorded (M20).",
            "latency against run order",
        )
    )
    if ctx.check.comparable:
        out.append(
            Figure(
                "sentences",
                plots.sentence_box_plot(conds),
                "Per-sentence first-token times per condition.",
                "box plots",
            )
        )
    return out


def _waterfalls(ctx: Context) -> list[Block]:
    out: list[Block] = []
    if not ctx.data.from_spans:
        return [Paragraph("No waterfall: these rows were not read from spans.", NOTE)]
    for label, cond in ctx.conds.items():
        i = representative(cond, ctx.data.rows)
        if i is None:
            continue
        row = ctx.data.rows[i]
        name = f"{title(label)}: run {row.run_id}, {row.question_id} round {row.round}"
        spans = ctx.data.turn_spans(i)
        if spans is None:
            out.append(Paragraph(f"No waterfall for {name}: its spans could not be read again.", NOTE))
            continue
        w = Waterfall(f"Representative turn, {name}", tuple(bars(spans)))
        key = "waterfall-" + ("Bp" if label == "B'" else "".join(ch if ch.isalnum() else "_" for ch in label))
        out.append(
            Figure(
                key,
                plots.waterfall_plot(w),
                f"Waterfall of one representative turn, {name}: its whole turn lies between the quartiles, and of "
                "those it has the most sentences (to show the overlap), then the nearest the median.",
                "waterfall",
            )
        )
    return out
