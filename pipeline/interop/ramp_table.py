"""The side-by-side table of a capacity-mode run: each server's devices held, then each ramp's step table.

Each ramp's folder is ``pipeline.capacity``'s own; its steps are read back from the CSV it writes
(``steps.csv``) by the capacity record's reader (``pipeline.records.ramp_result.read_steps``: each cell its
column's type again) and shown as written, in the columns ``SHOWN`` names (the rest stay in the file),
so that this table says no more and no less than the ramp measured. A second table puts every
server's P90 silence and verdict side by side, a row per device count.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.interop.server_ramps import EndedRamp, cpu_cells
from pipeline.records.ramp_result import CapacityFileError, StepRow, read_steps
from pipeline.report import markdown
from pipeline.report.sections import soak_windows

METERED = ("server", "gateway", "services", "cloud")
STEPS_CSV = "steps.csv"
SHOWN = (
    *("devices", "verdict", "turns", "silence_p50_ms", "silence_p90_ms", "silence_p99_ms", "silence_p90_low_ms"),
    *("silence_p90_high_ms", "whole_turn_p50_ms", "failed_no_answer", "failed_cut_connection", "failed_refused"),
    *("failed_other", "server_cpu_pct", "server_rss_mb", "lateness_p99_ms", "held_s", "reason"),
)


def ramp_markdown(ramps: Sequence[EndedRamp], intro: str) -> str:
    """The whole file: the summary, then one step table per ramp."""
    head = "| server | devices held | grew first | ramp exit | CPU server | CPU gateway | CPU services | CPU cloud |"
    lines = [intro, head, "|---|---|---|---|---|---|---|---|"]
    for ramp in ramps:
        cells = [ramp.label, ramp.held or "-", ramp.grew_first or "-", str(ramp.code), *cpu_cells(ramp.cpu, METERED)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *side_by_side(ramps)]
    for ramp in ramps:
        lines += ["", f"## {ramp.label}", "", f"Folder: `{ramp.folder}`.", "", *step_table(ramp.folder)]
        lines += soak_table(ramp.folder)
        if ramp.code != 0:
            lines += ["", f"The ramp ended with code {ramp.code}; its output ends:", "", "```"]
            lines += [*ramp.log.rstrip().splitlines()[-12:], "```"]
    return "\n".join(lines) + "\n"


def soak_table(folder: Path) -> list[str]:
    """A soak's verdict, its windows and its drift checks, as the report shows them ([] without a soak)."""
    shown = soak_windows.blocks(folder / "capacity.json", folder.name, draw=False)
    return [line for b in shown for line in ("", markdown.block(b))]


def steps_of(folder: Path) -> list[StepRow]:
    """The ramp's steps as written ([] when it wrote none)."""
    path = folder / STEPS_CSV
    return read_steps(path) if path.is_file() else []


def _text(value: object) -> str:
    """A cell as steps.csv wrote it (``str``, as the csv module writes a value), "-" for an empty one."""
    return "-" if value is None or value == "" else str(value)


def side_by_side(ramps: Sequence[EndedRamp]) -> list[str]:
    """Each server's P90 silence (ms) and verdict at each device count any ramp measured."""
    steps = {ramp.label: {row.devices: row for row in _readable(ramp.folder)} for ramp in ramps}
    counts = sorted({n for rows in steps.values() for n in rows})
    if not counts:
        return ["(no ramp measured a step)"]
    out = ["P90 silence (end of speech -> first audible), ms, and the step's verdict:", ""]
    out += ["| devices | " + " | ".join(r.label for r in ramps) + " |", "|---|" + "---|" * len(ramps)]
    for n in counts:
        cells = []
        for ramp in ramps:
            row = steps[ramp.label].get(n)
            cells.append(f"{_rounded(row.silence_p90_ms)} {row.verdict}" if row else "-")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    return out


def _rounded(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _readable(folder: Path) -> list[StepRow]:
    """``steps_of``, or none where the file cannot be read (``step_table`` says why)."""
    try:
        return steps_of(folder)
    except CapacityFileError:
        return []


def step_table(folder: Path) -> list[str]:
    """The ramp's steps as a markdown table in the ``SHOWN`` columns; a line saying so when there is none."""
    try:
        rows = steps_of(folder)
    except CapacityFileError as exc:
        return [f"({exc})"]
    if not rows:
        return [f"(no {STEPS_CSV}, or no step in it: the ramp measured no step)"]
    out = ["| " + " | ".join(SHOWN) + " |", "|" + "---|" * len(SHOWN)]
    out += ["| " + " | ".join(_text(getattr(row, c)) for c in SHOWN) + " |" for row in rows]
    return out
