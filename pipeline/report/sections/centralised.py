"""M21 (3) as numbers: one shared LLM serving N devices against every device with its own LLM.

When a crossover record (``crossover.json``, written by ``scripts/capacity_shared_bench.py`` beside its
capacity ramps) lies above the report's trace files, the boundary "concurrency capacity is a
centralised-vs-distributed trade-off" carries its figures: each shared LLM's silence at 1 device and at
the most devices measured, the device's own figure, and where the two cross; a table beside it gives the
curves. Every figure is labelled measured or estimated (M12): the device's own LLM is measured with one
device and estimated beyond (each device its own hardware); a crossing between two steps is interpolated.
Without a record the boundary stays in words. In a report of capacity ramps only (no condition sections,
so no boundaries) ``section`` gives the same figures under a heading of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.analysis.crossing import (
    CROSSES,
    ESTIMATED,
    NEVER_QUIETER,
    Comparison,
    Crossing,
    Shared,
    SilenceAt,
    compare,
    find_records,
    headcounts,
)
from pipeline.records.crossover import RecordError
from pipeline.report.document import WARNING, Block, Bullets, Heading, Paragraph, Table
from pipeline.report.sections.base import Context
from pipeline.report.sections.conclusion import CONCURRENCY_IN_WORDS

TITLE = "Centralised against distributed (M21 (3))"


@dataclass(frozen=True, slots=True)
class CrossoverRecords:
    """The crossover records above the report's traces, read, and those that could not be."""

    comparisons: tuple[Comparison, ...]
    problems: tuple[str, ...]


def read(files: Sequence[str]) -> CrossoverRecords:
    comparisons, problems = [], []
    for path in find_records(files):
        try:
            comparisons.append(compare(path))
        except RecordError as exc:
            problems.append(str(exc))
    return CrossoverRecords(tuple(comparisons), tuple(problems))


def _ms(p: SilenceAt, quantile: str) -> str:
    return f"{p.at(quantile):.0f} ms ({p.label})"


def _crossing(c: Crossing) -> str:
    if c.kind == CROSSES and c.devices is not None:
        why = f": {'; '.join(c.reasons)}" if c.reasons else ""
        return f"they cross at {c.devices:.1f} devices ({c.label}{why})"
    if c.kind == NEVER_QUIETER:
        return "the shared LLM is no quieter than a device's own from the first measured step (measured)"
    return f"no crossing within the measured range (up to {c.last_step} devices, measured)"


def _shared_sentence(s: Shared, device: Comparison) -> str:
    first, last = s.curve.points[0], s.curve.points[-1]
    own = device.device.points[0]  # the one measured, with 1 device
    p90 = next(c for c in s.crossings if c.quantile == "p90")
    beyond = f"; the same, {ESTIMATED}, for each of {last.devices}" if last.devices > 1 else ""
    return (
        f"{s.what}: silence P90 {_ms(first, 'p90')} at {first.devices} device(s), {_ms(last, 'p90')} at "
        f"{last.devices}, against {_ms(own, 'p90')} with 1 device for a device with its own LLM{beyond}; "
        f"{_crossing(p90)}"
    )


def boundary(found: CrossoverRecords) -> str | None:
    """The M21 (3) boundary with its figures, or None when no record was found (the words alone then)."""
    if not found.comparisons:
        return None
    parts = [_shared_sentence(s, c) for c in found.comparisons for s in c.shared]
    return (
        "Concurrency capacity is a trade-off between a centralised and a distributed architecture, not better "
        "or worse; measured on this machine (table below, silence = end of speech to first audible): "
        + "; ".join(parts)
        + "."
    )


def _cell(p: SilenceAt | None) -> str:
    if p is None:
        return "-"
    return f"{p.p50_ms:.0f} / {p.p90_ms:.0f} ({p.label})"


def blocks(found: CrossoverRecords) -> list[Block]:
    """The curves side by side and every crossing, after the boundaries."""
    out: list[Block] = [Paragraph(p, WARNING) for p in found.problems]
    for i, c in enumerate(found.comparisons):
        curves = [c.device, *(s.curve for s in c.shared)]
        headers = ("devices", "own LLM on each device", *(s.what for s in c.shared))
        rows = tuple((str(n), *(_cell(curve.point(n)) for curve in curves)) for n in headcounts(curves))
        caption = (
            f"Centralised against distributed (M21 (3)): silence P50 / P90 in ms against devices, from {c.path}. "
            f"Own LLM: {c.device_what}; measured with 1 device, {ESTIMATED} beyond (each device has its own "
            "hardware, so no device waits for another's). Past a shared LLM's saturation its queue grows through "
            "each step's hold, so the figures there depend on how long the step was held."
        )
        out.append(Table(f"centralised-{i + 1}" if i else "centralised", headers, rows, caption))
        out.append(
            Bullets(tuple(f"{s.what}, {x.quantile.upper()}: {_crossing(x)}" for s in c.shared for x in s.crossings))
        )
    return out


def section(ctx: Context) -> list[Block]:
    """The concurrency boundary with its figures, where the boundaries themselves are not shown (a report of
    capacity ramps only); nothing without a crossover record."""
    found = read(ctx.data.files)
    if not found.comparisons and not found.problems:
        return []
    return [Heading(2, TITLE), Bullets((boundary(found) or CONCURRENCY_IN_WORDS,)), *blocks(found)]
