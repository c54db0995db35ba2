"""Dataset -> report document: the sections in order, each saying what it could not compute.

Each section (``pipeline.report.sections``) owns its numbers, its tables and its words; the
document is the list below, with the status line (complete or not, and why) under the head.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    uncertainty,
    wire,
)
from pipeline.report.sections.base import Context, Section

TITLE = header.TITLE

SECTIONS: tuple[Section, ...] = (
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


def build(data: Dataset, draw: bool = True) -> Document:
    ctx = Context(data, draw)
    body: list[Block] = [block for section in SECTIONS for block in section(ctx)]
    head = header.section(ctx)  # last: it notes an empty dataset after the sections' own notes
    status = _status(ctx.incomplete)
    return Document(TITLE, (*head[:2], status, *head[2:], *body), not ctx.incomplete, ctx.check.comparable)


def _status(reasons: Sequence[str]) -> Paragraph:
    if not reasons:
        return Paragraph("Status: complete: every measured cell is filled from these runs.")
    unique = list(dict.fromkeys(reasons))
    return Paragraph("Status: INCOMPLETE (M12): " + "; ".join(unique) + ".", WARNING)
