"""The record of a supervised run's restarts, ``OUT/restarts/RUN.json``, for a report to read beside the traces.

``pipeline.serve --processes N`` restarts a process that died as a new segment of its run: the same folder
(``OUT/processes/K/``), a new run id (``RUN-pK-rJ`` for process K's J-th restart), so its rows and traces are
told apart from the dead segment's and none of them is lost. This file says which process ended how and
when, the run id its restart serves as, how long until it listened again, and, when the supervisor gave up
(past its restart limit), why. It is rewritten whole (a new file renamed over the old) at each change, so a
reader never sees half of it.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.transport.server.restart_budget import RestartLimit

SCHEMA = 1


def ended_how(returncode: int) -> str:
    """A process's end as an operator reads it: ``exit 1``, ``killed by SIGKILL``."""
    if returncode >= 0:
        return f"exit {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def record_path(out: Path, run_id: str) -> Path:
    """One record a run, as ``traces/RUN.jsonl`` is: two runs into one folder keep their own."""
    return out / "restarts" / f"{run_id}.json"


def segment_run_id(run_id: str, process: int, restart: int) -> str:
    """Process K's run id: ``RUN-pK`` as first started, ``RUN-pK-rJ`` after its J-th restart."""
    return f"{run_id}-p{process}" + (f"-r{restart}" if restart else "")


@dataclass(slots=True)
class Restart:
    """One process that ended by itself and was started again."""

    process: int
    restart: int  # 1 for the process's first restart
    ended_run_id: str  # the segment that ended
    run_id: str  # the segment its restart serves as
    ended: str  # ended_how's words
    returncode: int  # as subprocess gives it: negative, the signal that killed it
    ended_at: float  # epoch seconds, when the supervisor saw it end (within its poll, 50 ms)
    listening_after_s: float | None = None  # from ended_at until it said it serves again; None: not (yet)


@dataclass(slots=True)
class RestartRecord:
    """A supervised run's restarts so far, and why the supervisor gave up if it did."""

    run_id: str
    processes: int
    limit: RestartLimit
    restarts: list[Restart] = field(default_factory=list)
    gave_up: str = ""  # "": it did not

    def write(self, path: Path) -> None:
        data = {"schema": SCHEMA, **asdict(self)}
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".part")
        part.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        os.replace(part, path)


def read_restarts(path: Path) -> RestartRecord:
    """A record ``RestartRecord.write`` wrote; ValueError for another schema or a malformed file."""
    data: Any = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a restart record of schema {SCHEMA}")
    try:
        limit = RestartLimit(**data["limit"])
        restarts = [Restart(**item) for item in data["restarts"]]
        return RestartRecord(data["run_id"], data["processes"], limit, restarts, data["gave_up"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: malformed restart record ({exc})") from None
