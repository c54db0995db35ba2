"""The side-by-side table of a capacity-mode run: each server's devices held, then each ramp's step table.

Each ramp's folder is ``pipeline.capacity``'s own; its step table is read back from the CSV it
writes (``steps.csv``) and shown as it is, column for column, so that this table says no more and
no less than the ramp measured.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from pipeline.interop.ramp import Ramp, cpu_cells

METERED = ("server", "gateway", "services", "cloud")
STEPS_CSV = "steps.csv"


def ramp_markdown(ramps: Sequence[Ramp], intro: str) -> str:
    """The whole file: the summary, then one step table per ramp."""
    head = "| server | devices held | grew first | ramp exit | CPU server | CPU gateway | CPU services | CPU cloud |"
    lines = [intro, head, "|---|---|---|---|---|---|---|---|"]
    for ramp in ramps:
        cells = [ramp.label, ramp.held or "-", ramp.grew_first or "-", str(ramp.code), *cpu_cells(ramp.cpu, METERED)]
        lines.append("| " + " | ".join(cells) + " |")
    for ramp in ramps:
        lines += ["", f"## {ramp.label}", "", f"Folder: `{ramp.folder}`.", "", *step_table(ramp.folder)]
        if ramp.code != 0:
            lines += ["", f"The ramp ended with code {ramp.code}; its output ends:", "", "```"]
            lines += [*ramp.log.rstrip().splitlines()[-12:], "```"]
    return "\n".join(lines) + "\n"


def step_table(folder: Path) -> list[str]:
    """The ramp's steps as a markdown table, from its CSV; a line saying so when there is none."""
    path = folder / STEPS_CSV
    if not path.is_file():
        return [f"(no {STEPS_CSV}: the ramp measured no step)"]
    with path.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return [f"({STEPS_CSV} is empty)"]
    header, body = rows[0], rows[1:]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell or "-" for cell in row) + " |" for row in body]
    return out
