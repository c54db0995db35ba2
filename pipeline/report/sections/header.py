"""The report's head: title, source, and the warnings a reader must see first (simulated stages,
virtual clock, a refused comparison, a recording that disagrees with the traces, extra conditions)."""

from __future__ import annotations

from pipeline.report.conditions import KNOWN, title
from pipeline.report.document import NOTE, WARNING, Block, Heading, Paragraph
from pipeline.report.sections import capacity, recording_check, sweep
from pipeline.report.sections.base import Context

TITLE = "Voice pipeline latency report"


def section(ctx: Context) -> list[Block]:
    d = ctx.data
    out: list[Block] = [
        Heading(1, TITLE),
        Paragraph(
            f"Source: {d.source or '-'} ({len(d.files)} file(s)). {len(d.rows)} turn(s) in "
            f"{len(ctx.run_summaries)} run(s), every figure computed from the traces alone."
        ),
    ]
    if not d.rows:
        ctx.incomplete.append("no turns found")
        out.append(Paragraph("No turns were found: nothing was measured, every figure below is empty.", WARNING))
    if ctx.simulated:
        runs = ", ".join(f"{f.run_id} ({f.condition}: {f.scripted})" for f in ctx.simulated)
        out.append(
            Paragraph(
                f"SIMULATED: scripted stages in run(s) {runs}: their latencies are configured, not measured. "
                "No conclusion about real models may be drawn from these runs.",
                WARNING,
            )
        )
    virtual = [f.run_id for f in ctx.run_summaries if "virtual" in f.clock]
    if virtual:
        out.append(Paragraph(f"Virtual clock (simulated time) in run(s): {', '.join(virtual)}.", WARNING))
    # a sweep's points, a capacity ramp's steps, differ by design
    if not ctx.check.comparable and not sweep.covering(ctx) and not capacity.covering(ctx):
        out.append(
            Paragraph(
                "COMPARISON REFUSED (M11): "
                + " ".join(r + "." for r in ctx.check.reasons)
                + " Report the runs separately, or "
                "re-run them with matching settings.",
                WARNING,
            )
        )
    disagree = recording_check.beyond(ctx)
    if disagree:
        tolerance = ctx.acoustic.tolerance_ms if ctx.acoustic else 0.0
        out.append(
            Paragraph(
                f"The recording disagrees with the traces on {disagree} turn(s) by more than ±{tolerance:g} ms: "
                f"see {recording_check.HEADING}.",
                WARNING,
            )
        )
    extra = [title(c) for c in ctx.conds if c not in KNOWN]
    if extra:
        out.append(Paragraph(f"Other conditions shown as extra columns: {', '.join(extra)}.", NOTE))
    return out
