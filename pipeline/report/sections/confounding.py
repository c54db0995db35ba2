"""Section 1a, one variable at a time (M15, M9): how the conditions were run, and whether the stages they
share (the same VAD and ASR on the same audio) took the same time in each.

A shared stage that moved between conditions beyond its interval marks the comparison confounded: the
section names the stage, by how much, and what to do, the way hyperfine warns about outliers. The
statistics are ``pipeline.report.confound``'s.
"""

from __future__ import annotations

from pipeline.report import cells
from pipeline.report.conditions import title
from pipeline.report.confound import CPU, MIN_SHARE, StageCheck, checks, order
from pipeline.report.document import WARNING, Block, Heading, Paragraph, Table
from pipeline.report.sections.base import MEASURED, Context

HEADING = "1a. One variable at a time: the stages the conditions share (M15)"
ADVICE = (
    "Interleave the conditions (`python -m pipeline.experiment`, whose default `--order interleaved` has them "
    "take turns), or measure on a quieter machine, before reading the differences below as the LLM's."
)


def _line(c: StageCheck) -> tuple[str, ...]:
    d = c.difference
    verdict = "CONFOUNDED" if c.confounded else "same within its interval" if not d.real else "within noise"
    return (
        f"{title(c.label)} vs {title(c.base)}",
        c.stage.upper(),
        f"`{c.metric}`",
        cells.diff(d),
        cells.percent(d.percent),
        cells.diff(c.cpu) if c.cpu is not None else "not recorded" if c.stage in CPU else "- (runs per frame)",
        f"{c.n} / {c.n_base}",
        verdict,
        MEASURED,
    )


def table(found: list[StageCheck]) -> Table:
    headers = (
        "comparison",
        "stage",
        "column",
        "median difference (ms) [95 % CI]",
        "difference",
        "its CPU time's (ms) [95 % CI]",
        "turns",
        "verdict",
        "attribution",
    )
    caption = (
        "The same component on the same audio in both conditions: its median should not move. CONFOUNDED: the "
        f"interval excludes zero and the difference is at least {MIN_SHARE:.0%} of the baseline's median. Its "
        "CPU time: this process's, all threads, from the stage's start to its output; where it moves too, the "
        "work cost more (the machine's speed, or caches and memory shared with a neighbour); where it does not, "
        "the stage waited."
    )
    return Table("confounding", headers, tuple(_line(c) for c in found), caption)


def section(ctx: Context) -> list[Block]:
    measured = {label: c for label, c in ctx.conds.items() if c.measured}
    if len(measured) < 2:
        return []
    ran = order(measured)
    out: list[Block] = [Heading(2, HEADING), Paragraph(ran.words([title(c) for c in measured]) + ".")]
    if ctx.refused(out):
        return out
    found = checks(ctx.conds, ctx.pairs, ctx.data.runs)
    if not found:
        out.append(Paragraph("No stage is the same component in two compared conditions: nothing to watch."))
        return out
    out += [Paragraph(warning(c, ran.interleaved), WARNING) for c in found if c.confounded]
    out.append(table(found))
    return out


def warning(c: StageCheck, interleaved: bool) -> str:
    moved = (
        f"{title(c.label)} vs {title(c.base)}: the {c.stage.upper()} (the same component on the same audio) took "
        f"{cells.signed(c.difference.value)} ({cells.percent(c.difference.percent)}) in {title(c.label)}, beyond "
        "its interval."
    )
    moved += " " + _cpu_reading(c) if c.cpu is not None and c.cpu.value is not None else ""
    if interleaved:  # a drift over time falls on both: what is left runs beside the stage in one condition only
        return (
            f"Moved although interleaved: {moved} What one condition runs beside it did this: the on-device LLM's "
            "share of the CPU, caches and memory (a cost to its neighbours a device pays too, M17), or work the lab "
            "does that a device would not (`scripts/bench_neighbours.py` tells them apart). Read the other "
            "differences of this comparison with it in mind."
        )
    return (
        f"Confounded: {moved} Something other than the condition moved it, and can move every figure of this "
        f"comparison. {ADVICE}"
    )


def _cpu_reading(c: StageCheck) -> str:
    assert c.cpu is not None
    cpu = cells.diff(c.cpu)
    if c.shares_cpu:
        return f"Its CPU time moved with it ({cpu}): the same work cost more, it did not wait."
    return f"Its CPU time did not move as much ({cpu}): the stage waited, for a core, a lock or a neighbour."
