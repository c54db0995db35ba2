"""sweep.json, the record a sweep keeps beside bench.csv: its name, its format, and reading it.

``pipeline.sweep.record`` writes it (and reads it back to add a sweep); the report reads it to hold
a sweep's claims against the runs' own spans (``pipeline.report.sweeps``). The one reading lives
here, where both may reach it: the sweep and the report never import each other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FORMAT = "voice-latency-lab sweep 1"
FILE = "sweep.json"


class NotASweepRecord(ValueError):
    """A sweep.json that parses but holds no list of sweeps; the message names the file."""


def recorded_sweeps(folder: Path) -> list[dict[str, Any]]:
    """The sweeps recorded in ``folder``'s sweep.json, each as written (none when there is no file).
    ``NotASweepRecord`` where the file holds no list of sweeps; an unreadable file raises as reading does."""
    path = folder / FILE
    if not path.is_file():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    sweeps = data.get("sweeps") if isinstance(data, dict) else None
    if not isinstance(sweeps, list):
        raise NotASweepRecord(f"{path}: not a sweep record (no 'sweeps' list)")
    return sweeps
