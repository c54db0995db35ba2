"""Sweeps recorded beside the traces (``sweep.json``, written by ``python -m pipeline.sweep``), read by key.

A sweep names its variable, the settings its points may differ in, and each point's value, run
id and config_id. The report does not take these claims on trust: ``check`` holds them against
what the runs recorded in their own spans. The runs must differ in nothing but the sweep's
settings (M11, the variable under study) and ask the same questions (M5).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.analysis.sweep_file import FILE, NotASweepRecord, recorded_sweeps
from pipeline.records.turn_row import TurnRow
from pipeline.report.identity import differences
from pipeline.report.load import RunInfo

OK = "ok"


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One point of a recorded sweep, as the report reads it."""

    value: str
    run_id: str
    status: str  # ok, failed or pending (the sweep never reached it)
    config_id: str | None
    error: str
    setting: str  # what the point overrode, e.g. "[llm] max_tokens = 4"


@dataclass(frozen=True, slots=True)
class Sweep:
    """A sweep recorded beside the traces: its variable, the settings its points may differ in, its points."""

    sweep_id: str
    variable: str
    settings: tuple[str, ...]  # dotted patterns the points may differ in
    points: tuple[SweepPoint, ...]
    path: str


@dataclass(frozen=True, slots=True)
class SweepCheck:
    """Whether a sweep's points may be compared: why not, and what to know."""

    reasons: tuple[str, ...]  # why the points cannot be compared (M11, M5)
    warnings: tuple[str, ...]


def sweep_folders(files: Sequence[str]) -> list[Path]:
    """Where a sweep.json can be: beside bench.csv, i.e. above each trace file's ``traces/`` folder."""
    found: dict[Path, None] = {}
    for name in files:
        folder = Path(name).parent
        found[folder.parent if folder.name == "traces" else folder] = None
    return list(found)


def read_sweeps(files: Sequence[str]) -> tuple[list[Sweep], list[str]]:
    """Every sweep recorded beside these trace files, and what could not be read."""
    sweeps: list[Sweep] = []
    problems: list[str] = []
    for folder in sweep_folders(files):
        path = folder / FILE
        try:
            sweeps.extend(_sweep(s, str(path)) for s in recorded_sweeps(folder))
        except NotASweepRecord as exc:
            problems.append(str(exc))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"{path}: unreadable sweep record ({type(exc).__name__}: {exc})")
    return sweeps, problems


def _sweep(data: Mapping[str, Any], path: str) -> Sweep:
    points = tuple(
        SweepPoint(
            value=str(p["value"]),
            run_id=str(p["run_id"]),
            status=str(p["status"]),
            config_id=str(p["config_id"]) if p.get("config_id") else None,
            error=str(p.get("error") or ""),
            setting=_setting(p.get("overrides") or {}),
        )
        for p in data["points"]
    )
    settings = tuple(str(s) for s in data["settings"])
    return Sweep(str(data["sweep_id"]), str(data["variable"]), settings, points, path)


def _setting(overrides: Mapping[str, Mapping[str, Any]]) -> str:
    return "; ".join(f"[{section}] {key} = {value}" for section, kv in overrides.items() for key, value in kv.items())


def varies(sweep: Sweep, setting: str) -> bool:
    return any(fnmatch.fnmatchcase(setting, pattern) for pattern in sweep.settings)


def check(sweep: Sweep, runs: Mapping[str, RunInfo], rows: Sequence[TurnRow]) -> SweepCheck:
    """May the sweep's points that ran be compared, holding everything but the variable?"""
    ran = [p for p in sweep.points if p.status == OK and p.run_id in runs]
    infos = [runs[p.run_id] for p in ran]
    reasons = [f"run {i.run_id} does not record its settings (no lab.config_json)" for i in infos if not i.config_json]
    reasons += [f"run {i.run_id} recorded {i.config_jsons} different settings" for i in infos if i.config_jsons > 1]
    other = sorted({d.setting for d in differences(infos) if not varies(sweep, d.setting)})
    if other:
        reasons.append(f"settings other than {sweep.variable} differ: {', '.join(other)}")
    asked = {p.run_id: frozenset(str(r.question_id) for r in rows if r.run_id == p.run_id) for p in ran}
    if len(set(asked.values())) > 1:
        listed = "; ".join(f"{run}: {', '.join(sorted(q))}" for run, q in asked.items())
        reasons.append(f"question sets differ (M5): {listed}")
    warnings = [
        f"point {sweep.variable}={p.value}: run {p.run_id} is not in these traces"
        for p in sweep.points
        if p.status == OK and p.run_id not in runs
    ]
    warnings += [
        f"point {sweep.variable}={p.value}: sweep.json says config {p.config_id}, the traces {', '.join(i.config_ids)}"
        for p, i in zip(ran, infos, strict=True)
        if p.config_id and (p.config_id,) != i.config_ids
    ]
    return SweepCheck(tuple(reasons), tuple(warnings))
