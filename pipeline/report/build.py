"""Dataset -> report document: the sections in order, each saying what it could not compute.

Each section (``pipeline.report.sections``) owns its numbers, its tables and its words; the
document is the list below, with the status line (complete or not, and why) under the head.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.report import apart
from pipeline.report.acoustic_match import Acoustic
from pipeline.report.document import WARNING, Document, Paragraph
from pipeline.report.load import Dataset
from pipeline.report.sections import (
    amplification,
    capacity,
    centralised,
    cold_warm,
    confounding,
    critical_path,
    dilution,
    endpoint_cost,
    figures,
    header,
    integrity,
    outcomes,
    recording_check,
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
    capacity.section,  # beside the traces of a capacity ramp only
    result.section,
    confounding.section,
    cold_warm.section,
    recording_check.section,
    endpoint_cost.section,  # only where some question carries a truth
    segments.section,
    wire.section,
    critical_path.section,  # after the segments (and 2b, the wire, shown only over a transport)
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
SWEEP_SECTIONS: tuple[Section, ...] = (
    sweep.section,
    endpoint_cost.section,  # a sweep of the end of turn, where its questions carry a truth
    reference.cited_section,
    reference.method_section,
)


# A folder that is one or more capacity ramps (every run a step of one): the ramps are the reading; the
# condition sections would pool steps of different device counts, which differ by design. M21 (3)'s figures,
# when a crossover record is there, stay: its boundaries are not shown otherwise.
CAPACITY_SECTIONS: tuple[Section, ...] = (capacity.section, centralised.section, reference.method_section)


# Computed in forked children while this process computes the rest (``apart``): at 100,000 turns
# (``scripts/bench_report.py``) the two slowest sections, neither changing the context but for its
# notes and caches only it reads.
APART: tuple[Section, ...] = (figures.section, critical_path.section)


def build(data: Dataset, draw: bool = True, acoustic: Acoustic | None = None) -> Document:
    """The report of ``data`` (and of the acoustic rows measured from its recordings, where given)."""
    ctx = Context(data, draw, acoustic)
    sweeps = sweep.covering(ctx)
    ramps = not sweeps and capacity.covering(ctx)
    sections = SWEEP_SECTIONS if sweeps else CAPACITY_SECTIONS if ramps else SECTIONS
    with apart.started([s for s in APART if s in sections], ctx) as blocks:
        body = [block for section in sections for block in blocks(section)]
    head = header.section(ctx)  # last: it notes an empty dataset after the sections' own notes
    status = _status(ctx.incomplete)
    comparable = sweep.comparable(ctx, sweeps) if sweeps else ramps or ctx.check.comparable
    return Document(TITLE, (*head[:2], status, *head[2:], *body), not ctx.incomplete, comparable)


def _status(reasons: Sequence[str]) -> Paragraph:
    if not reasons:
        return Paragraph("Status: complete: every measured cell is filled from these runs.")
    unique = list(dict.fromkeys(reasons))
    return Paragraph("Status: INCOMPLETE (M12): " + "; ".join(unique) + ".", WARNING)
