"""What a capacity ramp writes: DIR/capacity.json (``Capacity``) and DIR/steps.csv (one ``Step`` a row),
declared once here; both are rewritten after every step, so a ramp stopped mid-way keeps what it measured.

Every figure of a step comes from that step's own trace rows (``verdict.figures``), except the server's
CPU and RSS (read from /proc by PID; empty when no PID was given) and the generator's send lateness
(the emulator's own record; empty when nothing recorded it: not measured, never zero).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import msgspec

SCHEMA_VERSION = 1
FAILURE_KINDS = ("no_answer", "cut_connection", "refused", "other")
VERDICTS = ("holds", "fails", "void", "too_few")


class Quantiles(msgspec.Struct, frozen=True):
    """P50/P90/P99 of one column with their 95 % bootstrap intervals ([low, high]; None: fewer than 2 values)."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    p50_ci: tuple[float, float] | None = None
    p90_ci: tuple[float, float] | None = None
    p99_ci: tuple[float, float] | None = None


class Step(msgspec.Struct, frozen=True):
    """One step of the ramp: N devices held, its figures and its verdict."""

    devices: int
    run_id: str
    config_id: str
    folder: str  # the step's run folder, relative to the capacity folder (traces/ and bench.csv)
    turns: int  # measured turns (warm-up left out), failed ones included
    failures: dict[str, int]  # by FAILURE_KINDS
    silence_ms: Quantiles  # first_audible_ms: end of speech -> first audible
    whole_turn_p50_ms: float | None
    whole_turn_p90_ms: float | None
    held_s: float  # from the last device's arrival to the end of the step's last turn
    lateness_p50_ms: float | None  # the generator's paced sends; None: not measured
    lateness_p99_ms: float | None
    lateness_sends: int
    server_cpu_pct: float | None  # % of one core, averaged over the hold; None: no --server-pid
    server_rss_mb: float | None  # the most seen during the hold
    verdict: str  # one of VERDICTS
    reason: str


class Capacity(msgspec.Struct):
    """A whole ramp: against what, with which users, and each step measured so far."""

    server: str  # the URL without credentials
    transport: str  # websocket or mqtt+udp
    fixtures: str
    profile: dict[str, Any]
    steps_planned: list[int]
    hold_s: float
    max_hold_s: float
    margin_pct: float
    margin_floor_ms: float
    min_turns: int
    steps: list[Step] = msgspec.field(default_factory=list)
    devices_held: int | None = None  # the knee; None until a step held
    knee: int | None = None  # the last step that held before the first that failed
    none_failed: bool = False  # no step failed: devices_held is only a lower bound
    stopped: str = ""  # why the ramp ended
    grew_first: str = ""  # the server segment that grew first (the lab's server only); "" when not known
    label: str = ""  # a name for the server in the report's curve
    schema: int = SCHEMA_VERSION


STEP_COLUMNS = (
    "devices",
    "verdict",
    "turns",
    "silence_p50_ms",
    "silence_p90_ms",
    "silence_p99_ms",
    "silence_p90_low_ms",
    "silence_p90_high_ms",
    "whole_turn_p50_ms",
    "whole_turn_p90_ms",
    *(f"failed_{k}" for k in FAILURE_KINDS),
    "server_cpu_pct",
    "server_rss_mb",
    "lateness_p50_ms",
    "lateness_p99_ms",
    "held_s",
    "run_id",
    "config_id",
    "reason",
)


def step_cells(s: Step) -> list[object]:
    ci = s.silence_ms.p90_ci
    cells: list[object] = [
        s.devices,
        s.verdict,
        s.turns,
        s.silence_ms.p50,
        s.silence_ms.p90,
        s.silence_ms.p99,
        ci[0] if ci else None,
        ci[1] if ci else None,
        s.whole_turn_p50_ms,
        s.whole_turn_p90_ms,
        *(s.failures.get(k, 0) for k in FAILURE_KINDS),
        s.server_cpu_pct,
        s.server_rss_mb,
        s.lateness_p50_ms,
        s.lateness_p99_ms,
        s.held_s,
        s.run_id,
        s.config_id,
        s.reason,
    ]
    return ["" if c is None else (round(c, 3) if isinstance(c, float) else c) for c in cells]


def write(folder: Path, result: Capacity) -> None:
    """capacity.json and steps.csv, each replaced whole (written aside, then renamed)."""
    folder.mkdir(parents=True, exist_ok=True)
    _replace(folder / "capacity.json", msgspec.json.format(msgspec.json.encode(result), indent=2) + b"\n")
    text = io.StringIO()
    out = csv.writer(text, lineterminator="\n")
    out.writerow(STEP_COLUMNS)
    out.writerows(step_cells(s) for s in result.steps)
    _replace(folder / "steps.csv", text.getvalue().encode())


def _replace(path: Path, data: bytes) -> None:
    aside = path.with_name(path.name + ".part")
    aside.write_bytes(data)
    aside.replace(path)


class CapacityFileError(ValueError):
    """A capacity.json that cannot be read."""


def read(path: Path) -> Capacity:
    try:
        return msgspec.json.decode(path.read_bytes(), type=Capacity)
    except OSError as exc:
        raise CapacityFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except msgspec.DecodeError as exc:
        raise CapacityFileError(f"{path}: not a capacity result ({exc})") from None
