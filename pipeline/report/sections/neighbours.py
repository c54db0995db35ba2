"""Beside section 4's segments (M17): what each condition's process spent during the stages that did not
change, so the on-device LLM's cost to its neighbours stands as its own figure.

The CPU time is this process's over all its threads (``pipeline.run.cpu``), from the stage's start to its
first output. During the ASR nothing else of the turn runs, so its CPU time is the ASR's own work: a
condition whose ASR took more of it did the same work slower (the machine, or caches shared with a
neighbour). During the TTS's first frame an in-process LLM is still generating the next sentence, so the
cores kept busy there beyond the TTS's own are the LLM's, taken from its neighbour, a cost a device pays
too. ``scripts/bench_neighbours.py`` measures the same as time, on the same text, against the LLM in its
own process.
"""

from __future__ import annotations

import numpy as np

from pipeline.analysis.numbers import quantile
from pipeline.report import cells
from pipeline.report.conditions import Condition, title
from pipeline.report.document import Block, Table
from pipeline.report.sections.base import MEASURED, Context

STAGES = (("ASR", "asr_ms", "asr_cpu_ms"), ("TTS first frame", "tts_first_frame_ms", "tts_first_frame_cpu_ms"))


def cores(cond: Condition, wall: str, cpu: str) -> float | None:
    """Median over turns of the stage's CPU time over its wall time: the cores the process kept busy."""
    w, c = cond.column(wall), cond.column(cpu)
    both = ~(np.isnan(w) | np.isnan(c)) & (np.nan_to_num(w) > 0)
    return quantile(np.sort(c[both] / w[both]), 0.5) if both.any() else None


def _median(cond: Condition, metric: str) -> str:
    found = cond.values(metric)
    return cells.ms(quantile(found, 0.5)) if len(found) else cells.NOT_MEASURED


def _row(cond: Condition) -> tuple[str, ...]:
    out = [title(cond.label)]
    for _, wall, cpu in STAGES:
        share = cores(cond, wall, cpu)
        out += [_median(cond, wall), _median(cond, cpu), "-" if share is None else f"{share:.2f}"]
    return (*out, MEASURED)


def section(ctx: Context) -> list[Block]:
    """The table, where any condition recorded its stages' CPU (a run on the real clock)."""
    conds = [c for c in ctx.conds.values() if c.measured]
    if not any(len(c.values(cpu)) for c in conds for _, _, cpu in STAGES):
        return []
    headers = ["condition"]
    for stage, _, _ in STAGES:
        headers += [f"{stage} (ms)", f"{stage}: CPU (ms)", f"{stage}: cores busy"]
    caption = (
        "The neighbours of the LLM, per condition (medians over measured turns): each stage's wall time, this "
        "process's CPU time over all its threads from the stage's start to its first output, and the cores it "
        "kept busy (CPU over wall, per turn). The ASR runs alone, so its CPU time is its own work. During the "
        "TTS's first frame an in-process LLM is still generating: cores busy there beyond a remote-LLM "
        "condition's are the LLM's, taken from its neighbour (M17), a cost a device pays too; "
        "`scripts/bench_neighbours.py` gives it as time on the same text."
    )
    return [Table("neighbours", (*headers, "attribution"), tuple(_row(c) for c in conds), caption)]
