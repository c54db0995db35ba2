"""The capacity record: what a capacity ramp writes, DIR/capacity.json (``Capacity``, its ``Step``s) and
DIR/steps.csv (one ``StepRow`` a step, the step's figures flattened into typed columns with their units),
declared once here with their one writer (``write``: both, rewritten after every step, so a ramp stopped
mid-way keeps what it measured) and their readers (``read``: capacity.json; ``read_steps``: steps.csv).

Every figure of a step comes from that step's own trace rows (``verdict.figures``), except the server's
CPU and RSS (read from /proc by PID; empty when no PID was given) and the generator's send lateness
(the emulator's own record; empty when nothing recorded it: not measured, never zero).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Annotated, Any, Final

import msgspec
from msgspec import Meta
from msgspec.structs import astuple

from pipeline.records.schema import CORE_PCT, COUNT, MB, MS, SECONDS, TEXT, RecordFileError, meta, read_csv, schema
from pipeline.records.whole_lines import replace_whole

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


class MachineSpeed(msgspec.Struct, frozen=True):
    """How long fixed pieces of a server's work took on this machine at one moment, ms (lower: faster;
    ``capacity.machine_speed``). None: that piece could not be measured here."""

    json_ms: float
    socket_ms: float
    opus_ms: float | None = None
    onnx_ms: float | None = None


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
    machine: MachineSpeed | None = None  # measured just before the step's devices started


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
    drift: str = ""  # a soak's drift verdict in words (soak.json has its windows); "" when no soak was held
    schema: int = SCHEMA_VERSION


def _ms(meaning: str) -> Meta:
    return meta(MS, meaning)


class StepRow(msgspec.Struct, frozen=True, gc=False):
    """One step as steps.csv writes it: its figures flattened into columns, in the file's order (an empty
    cell: not measured)."""

    devices: Annotated[int, meta(COUNT, "devices held in the step")]
    verdict: Annotated[str, meta(TEXT, "holds, fails, void (the generator fell behind) or too_few (turns)")]
    turns: Annotated[int, meta(COUNT, "measured turns (warm-up left out), failed ones included")]
    silence_p50_ms: Annotated[float | None, _ms("silence (end of speech -> first audible) P50")]
    silence_p90_ms: Annotated[float | None, _ms("silence P90")]
    silence_p99_ms: Annotated[float | None, _ms("silence P99")]
    silence_p90_low_ms: Annotated[float | None, _ms("the silence P90's 95 % bootstrap interval: its low end")]
    silence_p90_high_ms: Annotated[float | None, _ms("the silence P90's 95 % bootstrap interval: its high end")]
    whole_turn_p50_ms: Annotated[float | None, _ms("whole turn P50")]
    whole_turn_p90_ms: Annotated[float | None, _ms("whole turn P90")]
    failed_no_answer: Annotated[int, meta(COUNT, "turns that got no answer")]
    failed_cut_connection: Annotated[int, meta(COUNT, "turns whose connection was cut")]
    failed_refused: Annotated[int, meta(COUNT, "turns whose connection was refused")]
    failed_other: Annotated[int, meta(COUNT, "turns that failed otherwise")]
    server_cpu_pct: Annotated[float | None, meta(CORE_PCT, "the server's CPU, averaged over the hold")]
    server_rss_mb: Annotated[float | None, meta(MB, "the server's RSS, the most seen during the hold")]
    lateness_p50_ms: Annotated[float | None, _ms("the generator's paced sends: how late, P50")]
    lateness_p99_ms: Annotated[float | None, _ms("the generator's paced sends: how late, P99")]
    held_s: Annotated[float, meta(SECONDS, "from the last device's arrival to the end of the step's last turn")]
    machine_json_ms: Annotated[float | None, _ms("the machine's speed before the step: fixed JSON decoding")]
    machine_socket_ms: Annotated[float | None, _ms("the machine's speed: fixed loopback TCP round trips")]
    machine_opus_ms: Annotated[float | None, _ms("the machine's speed: fixed Opus encoding and decoding")]
    machine_onnx_ms: Annotated[float | None, _ms("the machine's speed: fixed Silero VAD inferences")]
    run_id: Annotated[str, meta(TEXT, "the step's run")]
    config_id: Annotated[str, meta(TEXT, "the step's run's config_id")]
    reason: Annotated[str, meta(TEXT, "why the verdict")]


STEP_SCHEMA: Final = schema(StepRow)
STEP_COLUMNS: Final = tuple(c.name for c in STEP_SCHEMA)  # steps.csv's header


def _rounded(value: Any) -> Any:
    return round(value, 3) if isinstance(value, float) else value


def step_row(s: Step) -> StepRow:
    """The step as steps.csv writes it (ms to the microsecond)."""
    ci = s.silence_ms.p90_ci
    cells = [
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
        *machine_cells(s.machine),
        s.run_id,
        s.config_id,
        s.reason,
    ]
    return StepRow(*map(_rounded, cells))


def machine_cells(m: MachineSpeed | None) -> tuple[float | None, ...]:
    """The machine's four timings, in the columns' order (all None: not measured)."""
    return (None,) * 4 if m is None else (m.json_ms, m.socket_ms, m.opus_ms, m.onnx_ms)


def step_cells(row: StepRow) -> list[object]:
    """The row's cells, in ``STEP_COLUMNS`` order (not measured: an empty cell)."""
    return ["" if c is None else c for c in astuple(row)]


def write(folder: Path, result: Capacity) -> None:
    """capacity.json and steps.csv, each replaced whole (written aside, then renamed)."""
    folder.mkdir(parents=True, exist_ok=True)
    replace_whole(folder / "capacity.json", msgspec.json.format(msgspec.json.encode(result), indent=2) + b"\n")
    text = io.StringIO()
    out = csv.writer(text, lineterminator="\n")
    out.writerow(STEP_COLUMNS)
    out.writerows(step_cells(step_row(s)) for s in result.steps)
    replace_whole(folder / "steps.csv", text.getvalue().encode())


class CapacityFileError(ValueError):
    """A capacity.json or a steps.csv that cannot be read."""


def read(path: Path) -> Capacity:
    try:
        return msgspec.json.decode(path.read_bytes(), type=Capacity)
    except OSError as exc:
        raise CapacityFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except msgspec.DecodeError as exc:
        raise CapacityFileError(f"{path}: not a capacity result ({exc})") from None


def read_steps(path: Path) -> list[StepRow]:
    """The rows of a steps.csv, each cell its column's type again (an empty cell: None)."""
    try:
        return [row for _, row in read_csv(path, StepRow, STEP_SCHEMA)]
    except RecordFileError as exc:
        raise CapacityFileError(str(exc)) from None
