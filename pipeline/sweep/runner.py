"""One sweep point as its own process: the replay (or the offline run, for B') with the point's
settings file last, so it overrides the base settings in that one variable only.

A point runs in a child process, not in this one: a model that cannot load, or native code
that crashes, fails that point only, and every point starts from the same cold state (models
loaded once per run, as in any replay). Points run one after another, never together: two
at once would load each other's CPU (M9). What the run printed goes to the point's log; its
config_id and turn count are read back from bench.csv, which holds the rows of its traces.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.plan.command_line import replay_argv
from pipeline.plan.run_plan import RunPlan
from pipeline.records.bench_csv import read_bench_csv
from pipeline.records.turn_row import TurnRow
from pipeline.sweep.points import OFFLINE, Point
from pipeline.sweep.record import FAILED, OK, PointRecord

# pipeline.offline's exit statuses for a run that did run: 3 = something reached out, 4 = check incomplete
RAN = {
    0: "",
    3: "ran, but something reached beyond loopback (see offline/verdict.json)",
    4: "ran, but the offline check could not be completed",
}


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What every point shares: the same questions, base settings, rounds and replay options (M9)."""

    root: Path  # the repository: where ``python -m pipeline.replay`` resolves
    fixtures: Path
    configs: tuple[Path, ...]
    out: Path
    rounds: int
    limit: int
    clock: str | None = None  # every point's [run] clock, when given
    fast: bool = False  # every point's audio sent as fast as possible
    timeout: float | None = None  # every point's turn time limit (s), when given
    model_cache: Path | None = None


def point_plan(point: Point, options: RunOptions, settings: Path) -> RunPlan:
    """The point's run: the base settings, then the point's own file (``settings``), the questions, rounds and
    options every point shares; its settings are refused as the replay would refuse them (``config()``)."""
    run: dict[str, Any] = {"rounds": options.rounds, "limit": options.limit}
    if options.clock is not None:
        run["clock"] = options.clock
    if options.timeout is not None:
        run["turn_timeout_s"] = options.timeout
    if options.fast:
        run["pacing"] = "fast"
    configs = (*options.configs, settings)
    return RunPlan(
        options.fixtures,
        point.run_id,
        configs,
        {"run": run},
        out=options.out,
        model_cache=options.model_cache,
        quiet=True,
    )


def run_point(point: Point, options: RunOptions, settings: Path, log: Path) -> PointRecord:
    """Run one point to its end and say what it left: ok with its config_id, or failed and why."""
    cmd = [sys.executable, "-m", point.module, *replay_argv(point_plan(point, options, settings))]
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as sink:
        code = subprocess.run(cmd, cwd=options.root, stdout=sink, stderr=subprocess.STDOUT).returncode
    seconds = round(time.monotonic() - started, 1)
    found = run_rows(options.out / "bench.csv", point.run_id)
    record = PointRecord(point.value, point.run_id, point.overrides, exit_code=code, seconds=seconds)
    record.config_ids = sorted({str(r.config_id) for r in found})
    record.config_id = record.config_ids[0] if len(record.config_ids) == 1 else None
    record.turns = len(found)
    ran = code in RAN if point.module == OFFLINE else code == 0
    if ran and found:
        record.status, record.error = OK, RAN.get(code, "")
    else:
        record.status = FAILED
        record.error = failure(log.read_text(encoding="utf-8", errors="replace").splitlines(), code, len(found))
    return record


def run_rows(bench: Path, run_id: str) -> list[TurnRow]:
    if not bench.is_file():
        return []
    return [r for r in read_bench_csv(bench) if r.run_id == run_id]


def failure(lines: Sequence[str], code: int, turns: int) -> str:
    """Why a point failed, in the run's own words: its ``error:`` line, else its last line."""
    said = [line.strip() for line in lines if line.strip()]
    errors = [line.removeprefix("error:").strip() for line in said if line.startswith("error:")]
    reason = errors[-1] if errors else (said[-1] if said else "no output")
    if code == 0 and not turns:
        return f"no turn recorded ({reason})"
    return f"exit status {code}: {reason}" + (f"; {turns} turn(s) recorded before it" if turns else "")
