"""The acoustic rows: one per turn found in a recording, named as the device rows' columns, and their CSV.

Times are seconds from the recording's first sample (``*_s``) and milliseconds from the end of the user's
speech (``first_audible_ms``: the silence a person hears; ``whole_turn_ms``: to the answer's last audible
sample), ``measured_by`` says ``acoustic`` so the report can set these rows beside the traces' own. A turn
that could not be measured is a row with ``ok`` false and ``error`` naming the file and the reason; a file
that could not be measured at all is one such row with no question. ``note`` is what was noticed but did
not stop the measurement (clipping), as the device rows' ``note`` is; ``recording`` the file measured.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import astuple, dataclass, fields
from pathlib import Path

MEASURED_BY = "acoustic"


@dataclass(frozen=True, slots=True)
class AcousticRow:
    """One turn as the recording tells it (the contract's columns, in order, then ``note`` and ``recording``)."""

    run_id: str
    device: str
    question_id: str
    round: int | None
    speech_end_s: float | None
    first_audible_s: float | None
    last_audible_s: float | None
    first_audible_ms: float | None
    whole_turn_ms: float | None
    measured_by: str
    ok: bool
    error: str
    note: str = ""
    recording: str = ""  # the file measured, so a reader can show its waveform


COLUMNS = tuple(f.name for f in fields(AcousticRow))


def failed_row(
    device: str, error: str, question_id: str = "", round_no: int | None = None, note: str = ""
) -> AcousticRow:
    """A turn (or a whole file, with no question) that could not be measured."""
    return AcousticRow("", device, question_id, round_no, None, None, None, None, None, MEASURED_BY, False, error, note)


def write_rows(path: Path, rows: Iterable[AcousticRow]) -> int:
    """Write the rows as CSV (header first); how many were written."""
    count = 0
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(COLUMNS)
        for row in rows:
            out.writerow(_cell(v) for v in astuple(row))
            count += 1
    return count


def read_rows(path: Path) -> list[AcousticRow]:
    """The rows of a file ``write_rows`` wrote."""
    with path.open(newline="", encoding="utf-8") as fh:
        return [_row(record) for record in csv.DictReader(fh)]


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(round(value, 9))  # a nanosecond: finer than any sample, shorter than float noise
    return str(value)


def _row(record: dict[str, str]) -> AcousticRow:
    def number(key: str) -> float | None:
        return float(record[key]) if record.get(key) else None

    return AcousticRow(
        run_id=record["run_id"],
        device=record["device"],
        question_id=record["question_id"],
        round=int(record["round"]) if record["round"] else None,
        speech_end_s=number("speech_end_s"),
        first_audible_s=number("first_audible_s"),
        last_audible_s=number("last_audible_s"),
        first_audible_ms=number("first_audible_ms"),
        whole_turn_ms=number("whole_turn_ms"),
        measured_by=record["measured_by"],
        ok=record["ok"] == "true",
        error=record["error"],
        note=record.get("note", ""),
        recording=record.get("recording", ""),
    )
