"""The closing sections: the cited reference figures (never measured here, M12) and how the figures were computed."""

from __future__ import annotations

from pipeline.analysis import bootstrap
from pipeline.report import cited, drift
from pipeline.report.cited import CAVEAT
from pipeline.report.document import NOTE, Block, Bullets, Heading, Paragraph, Table
from pipeline.report.identity import CONDITION_DEFINING, HELD_ACROSS_CONDITIONS
from pipeline.report.sections.base import CITED, Context
from pipeline.report.sections.outcomes import OUTCOME_RULES


def cited_table() -> Table:
    rows = tuple((stage, typical, CITED) for stage, typical in cited.BREAKDOWN)
    return Table("cited", ("stage", "typical (cited)", "attribution"), rows, cited.CONFIGURATION)


def cited_section(_ctx: Context) -> list[Block]:
    return [
        Heading(2, "Cited reference (not measured here)"),
        Paragraph("Cited figures, from someone else's document; they never fill a measured cell (M12).", NOTE),
        cited_table(),
        Paragraph(CAVEAT, NOTE),
    ]


def method_section(_ctx: Context) -> list[Block]:
    return [
        Heading(2, "How the figures were computed"),
        Bullets(
            (
                "Rows are recomputed from the trace spans alone (pipeline.analysis); rows.csv beside this report "
                "holds exactly those rows.",
                "Statistics use measured turns only: warm-up (round 1) excluded, failed turns counted in the "
                "success rate and absent from latency figures.",
                f"Intervals: percentile bootstrap, {bootstrap.RESAMPLES} resamples, 95%, seed {bootstrap.SEED}; "
                "differences resample both conditions independently.",
                "Outcomes (M16): " + OUTCOME_RULES,
                f"Drift (M20): Spearman rho of latency (relative to the same question's median) against run order "
                f">= {drift.RHO_FLAG} and second-half median >= {100 * drift.RISE_FLAG:.0f}% above the first half; "
                f"needs {drift.MIN_TURNS} successful turns over {drift.MIN_ROUNDS} measured rounds.",
                "Config identity (M11): conditions may differ only in "
                + ", ".join(CONDITION_DEFINING)
                + ", not in "
                + ", ".join(HELD_ACROSS_CONDITIONS)
                + ".",
            )
        ),
    ]
