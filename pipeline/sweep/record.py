"""``sweep.json`` beside bench.csv: what a sweep varied and which run each point is.

One file per output folder holds every sweep run into it (a list), each rewritten after
every point, so a sweep cut short still says which points ran, which failed and why. The
report reads it by key (``pipeline.report.sweeps``), as it reads an offline verdict::

    {"format": "voice-latency-lab sweep 1",
     "sweeps": [{"sweep_id", "variable", "settings", "fixtures", "configs", "rounds", "limit",
                 "started", "finished",
                 "points": [{"value", "run_id", "overrides", "status", "config_id", "config_ids",
                             "turns", "exit_code", "error", "seconds", "log"}]}]}

``status`` is ``pending`` (not run yet), ``ok`` (the run recorded turns; failed turns are data,
M7) or ``failed`` (the run recorded no turn: its settings were refused, a model could not load).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.analysis.sweep_file import FILE, FORMAT, recorded_sweeps
from pipeline.sweep.points import SweepPlan

PENDING, OK, FAILED = "pending", "ok", "failed"


@dataclass(slots=True)
class PointRecord:
    """One point of a sweep as recorded: its value, its run and how the run went."""

    value: str
    run_id: str
    overrides: dict[str, dict[str, Any]]
    status: str = PENDING
    config_id: str | None = None
    config_ids: list[str] = field(default_factory=list)  # more than one is an inconsistency the report flags
    turns: int = 0
    exit_code: int | None = None
    error: str = ""
    seconds: float | None = None
    log: str = ""  # the point's output, relative to the sweep.json folder


@dataclass(slots=True)
class SweepRecord:
    """One sweep as recorded in sweep.json: what it varied, how each point was run, and the points."""

    sweep_id: str
    variable: str
    settings: list[str]
    fixtures: str
    configs: list[str]
    rounds: int
    limit: int
    started: str
    points: list[PointRecord]
    finished: str = ""


def new_record(
    plan: SweepPlan, fixtures: Path, configs: list[Path], rounds: int, limit: int, started: str
) -> SweepRecord:
    """A sweep's record before its first point has run (every point pending)."""
    points = [PointRecord(p.value, p.run_id, p.overrides) for p in plan.points]
    return SweepRecord(
        plan.sweep_id,
        plan.variable.name,
        list(plan.variable.settings),
        str(fixtures),
        [str(c) for c in configs],
        rounds,
        limit,
        started,
        points,
    )


def save(folder: Path, sweep: SweepRecord) -> Path:
    """Write ``sweep`` into the folder's record, replacing an entry with the same id; atomically,
    so a reader never sees half a file."""
    mine = dataclasses.asdict(sweep)
    sweeps = recorded_sweeps(folder)
    found = [i for i, s in enumerate(sweeps) if s.get("sweep_id") == sweep.sweep_id]
    if found:
        sweeps[found[0]] = mine
    else:
        sweeps.append(mine)
    data = {"format": FORMAT, "sweeps": sweeps}
    path = folder / FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
