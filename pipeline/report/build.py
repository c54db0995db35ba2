"""Dataset -> report document: the sections in order, each saying what it could not compute.

Each section (``pipeline.report.sections``) owns its numbers, its tables and its words; the
document is the list below, with the status line (complete or not, and why) under the head.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pipeline.report import forked
from pipeline.report.document import WARNING, Block, Document, Paragraph
from pipeline.report.load import Dataset
from pipeline.report.sections import (
    amplification,
    dilution,
    figures,
    header,
    integrity,
    outcomes,
    reference,
    result,
    segments,
    sweep,
    uncertainty,
    wire,
)
from pipeline.report.sections.base import Context, Section

TITLE = header.TITLE

SECTIONS: tuple[Section, ...] = (
    sweep.section,  # first: in a sweep's folder it is the reading; elsewhere it shows nothing
    result.section,
    segments.section,
    wire.section,
    amplification.section,
    dilution.section,
    outcomes.section,
    integrity.section,
    uncertainty.section,
    figures.section,
    reference.cited_section,
    reference.method_section,
)


# A folder that is one sweep (every run a point of it): the sweep is the reading; the condition
# sections would pool its points, which differ by design, so they are left out.
SWEEP_SECTIONS: tuple[Section, ...] = (sweep.section, reference.cited_section, reference.method_section)


# From this many rows on, work is done in forked children: the runs' facts and drift checks while this
# process groups the rows, and the plots but the last (the report's dearest section at fleet scale) while
# this process writes the other sections and draws the last; below, forking costs more than it saves.
APART_ROWS = 20_000


def build(data: Dataset, draw: bool = True, apart: bool | None = None) -> Document:
    """The report of ``data``; ``apart``: parts of it made in other processes (default: for a large dataset)."""
    apart = len(data.rows) >= APART_ROWS if apart is None else apart
    ctx = Context(data, draw, apart)
    sweeps = sweep.covering(ctx)
    sections = SWEEP_SECTIONS if sweeps else SECTIONS
    body = _sections(ctx, sections)
    head = header.section(ctx)  # last: it notes an empty dataset after the sections' own notes
    status = _status(ctx.incomplete)
    comparable = sweep.comparable(ctx, sweeps) if sweeps else ctx.check.comparable
    return Document(TITLE, (*head[:2], status, *head[2:], *body), not ctx.incomplete, comparable)


def _sections(ctx: Context, sections: Sequence[Section]) -> list[Block]:
    if not (ctx.apart and ctx.draw and figures.section in sections):
        return [block for section in sections for block in section(ctx)]
    with forked.apart(lambda: figures.first(ctx), fork=True) as drawn:  # forked now: the context as it is
        return [
            block
            for section in sections
            for block in (_figures(ctx, drawn) if section is figures.section else section(ctx))
        ]


def _figures(ctx: Context, drawn: Callable[[], list[Block]]) -> list[Block]:
    last = figures.last(ctx)  # drawn here before waiting for the rest
    return drawn() + last


def _status(reasons: Sequence[str]) -> Paragraph:
    if not reasons:
        return Paragraph("Status: complete: every measured cell is filled from these runs.")
    unique = list(dict.fromkeys(reasons))
    return Paragraph("Status: INCOMPLETE (M12): " + "; ".join(unique) + ".", WARNING)
