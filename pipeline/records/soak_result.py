"""The soak record: what ``pipeline.capacity --soak`` writes beside capacity.json, DIR/soak.json (``Soak``, its
``SoakWindow``s and its drift checks) and DIR/windows.csv (one ``WindowRow`` a window), declared once here
with their one writer (``write``: both replaced whole after every window, so a soak stopped midway keeps
every window it finished) and their readers.

A window's turn figures come from the rows of the turns that *finished* inside it (warm-ups left out); the
server's figures (CPU over the window, RSS, open descriptors and threads sampled through it) from /proc by
PID, empty without one; the folders' sizes at the window's end.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Annotated, Any, Final

import msgspec
from msgspec.structs import astuple

from pipeline.records.ramp_result import FAILURE_KINDS, MachineSpeed, Quantiles, machine_cells
from pipeline.records.schema import CORE_PCT, COUNT, MB, MS, SECONDS, RecordFileError, meta, read_csv, schema
from pipeline.records.whole_lines import replace_whole

SCHEMA_VERSION = 1


class SoakWindow(msgspec.Struct, frozen=True):
    """One window of the soak: its turns, and the server and the folders as they were through it."""

    index: int  # 1, 2, ...
    start_s: float  # since the last device arrived
    end_s: float
    turns: int  # measured turns that finished inside the window, failed ones included
    failures: dict[str, int]  # by FAILURE_KINDS
    silence_ms: Quantiles
    lateness_p99_ms: float | None  # the generator's paced sends in the window; None: nothing recorded
    server_cpu_pct: float | None  # % of one core, over the window
    rss_min_mb: float | None  # the server's RSS samples through the window (its tree's, summed)
    rss_max_mb: float | None
    fds_max: int | None  # open file descriptors of the server's tree, the most sampled
    threads_max: int | None
    device_traces_mb: float  # the soak's own trace folder at the window's end
    server_traces_mb: float | None  # --server-traces at the window's end; None when not given
    machine: MachineSpeed | None  # measured at the window's end, while the devices were being served


class DriftCheck(msgspec.Struct, frozen=True):
    """Whether one figure rose across the windows (M20), the figures it was judged on, and why."""

    figure: str  # silence_p50_ms, silence_p90_ms, rss_mb, fds, threads
    flagged: bool
    first: float | None  # the first window's value
    last: float | None
    rho: float | None  # Spearman's rank correlation of the windows' values with their order
    per_hour: float | None  # the Theil-Sen slope over the windows, in the figure's unit per hour
    reason: str


class Soak(msgspec.Struct):
    """A soak: one step of ``devices`` held ``duration_s``, cut into windows of ``window_s``."""

    devices: int
    duration_s: float
    window_s: float
    run_id: str
    folder: str  # the soak's run, relative to the capacity folder
    windows: list[SoakWindow] = msgspec.field(default_factory=list)
    drift: list[DriftCheck] = msgspec.field(default_factory=list)
    drifted: bool = False  # any check flagged
    stopped: str = ""
    schema: int = SCHEMA_VERSION


def _ms(meaning: str) -> msgspec.Meta:
    return meta(MS, meaning)


class WindowRow(msgspec.Struct, frozen=True, gc=False):
    """One window as windows.csv writes it (an empty cell: not measured)."""

    window: Annotated[int, meta(COUNT, "the window's number, from 1")]
    start_s: Annotated[float, meta(SECONDS, "its start, since the last device arrived")]
    end_s: Annotated[float, meta(SECONDS, "its end")]
    turns: Annotated[int, meta(COUNT, "measured turns that finished in it, failed ones included")]
    silence_p50_ms: Annotated[float | None, _ms("silence (end of speech -> first audible) P50")]
    silence_p50_low_ms: Annotated[float | None, _ms("the P50's 95 % bootstrap interval: its low end")]
    silence_p50_high_ms: Annotated[float | None, _ms("the P50's interval: its high end")]
    silence_p90_ms: Annotated[float | None, _ms("silence P90")]
    silence_p90_low_ms: Annotated[float | None, _ms("the P90's 95 % bootstrap interval: its low end")]
    silence_p90_high_ms: Annotated[float | None, _ms("the P90's interval: its high end")]
    failed_no_answer: Annotated[int, meta(COUNT, "turns that got no answer")]
    failed_cut_connection: Annotated[int, meta(COUNT, "turns whose connection was cut")]
    failed_refused: Annotated[int, meta(COUNT, "turns whose connection was refused")]
    failed_other: Annotated[int, meta(COUNT, "turns that failed otherwise")]
    lateness_p99_ms: Annotated[float | None, _ms("the generator's paced sends in the window: how late, P99")]
    server_cpu_pct: Annotated[float | None, meta(CORE_PCT, "the server's CPU over the window")]
    rss_min_mb: Annotated[float | None, meta(MB, "the server's RSS, the least sampled in the window")]
    rss_max_mb: Annotated[float | None, meta(MB, "the server's RSS, the most sampled in the window")]
    fds_max: Annotated[int | None, meta(COUNT, "the server's open file descriptors, the most sampled")]
    threads_max: Annotated[int | None, meta(COUNT, "the server's threads, the most sampled")]
    device_traces_mb: Annotated[float, meta(MB, "the soak's trace folder at the window's end")]
    server_traces_mb: Annotated[float | None, meta(MB, "the server's trace folder at the window's end")]
    machine_json_ms: Annotated[float | None, _ms("the machine's speed at the window's end: fixed JSON decoding")]
    machine_socket_ms: Annotated[float | None, _ms("the machine's speed: fixed loopback TCP round trips")]
    machine_opus_ms: Annotated[float | None, _ms("the machine's speed: fixed Opus encoding and decoding")]
    machine_onnx_ms: Annotated[float | None, _ms("the machine's speed: fixed Silero VAD inferences")]


WINDOW_SCHEMA: Final = schema(WindowRow)
WINDOW_COLUMNS: Final = tuple(c.name for c in WINDOW_SCHEMA)


def _interval(ci: tuple[float, float] | None) -> tuple[float | None, float | None]:
    return (None, None) if ci is None else ci


def window_row(w: SoakWindow) -> WindowRow:
    """The window as windows.csv writes it (ms to the microsecond)."""
    q = w.silence_ms
    cells: list[Any] = [
        w.index,
        w.start_s,
        w.end_s,
        w.turns,
        q.p50,
        *_interval(q.p50_ci),
        q.p90,
        *_interval(q.p90_ci),
        *(w.failures.get(k, 0) for k in FAILURE_KINDS),
        w.lateness_p99_ms,
        w.server_cpu_pct,
        w.rss_min_mb,
        w.rss_max_mb,
        w.fds_max,
        w.threads_max,
        w.device_traces_mb,
        w.server_traces_mb,
        *machine_cells(w.machine),
    ]
    rounded: list[Any] = [round(c, 3) if isinstance(c, float) else c for c in cells]
    return WindowRow(*rounded)


def write(folder: Path, soak: Soak) -> None:
    """soak.json and windows.csv, each replaced whole (written aside, then renamed)."""
    folder.mkdir(parents=True, exist_ok=True)
    replace_whole(folder / "soak.json", msgspec.json.format(msgspec.json.encode(soak), indent=2) + b"\n")
    text = io.StringIO()
    out = csv.writer(text, lineterminator="\n")
    out.writerow(WINDOW_COLUMNS)
    for w in soak.windows:
        out.writerow("" if c is None else c for c in astuple(window_row(w)))
    replace_whole(folder / "windows.csv", text.getvalue().encode())


class SoakFileError(ValueError):
    """A soak.json or a windows.csv that cannot be read."""


def read(path: Path) -> Soak:
    try:
        return msgspec.json.decode(path.read_bytes(), type=Soak)
    except OSError as exc:
        raise SoakFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except msgspec.DecodeError as exc:
        raise SoakFileError(f"{path}: not a soak result ({exc})") from None


def read_windows(path: Path) -> list[WindowRow]:
    """The rows of a windows.csv, each cell its column's type again (an empty cell: None)."""
    try:
        return [row for _, row in read_csv(path, WindowRow, WINDOW_SCHEMA)]
    except RecordFileError as exc:
        raise SoakFileError(str(exc)) from None
