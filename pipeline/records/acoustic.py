"""The acoustic record: one row per turn found in a recording, named as the device rows' columns, with its one
writer (``pipeline.acoustic measure ... --out ROWS.csv``) and its one reader (the report's ``--acoustic``).

Times are seconds from the recording's first sample (``*_s``) and milliseconds from the end of the user's
speech (``first_audible_ms``: the silence a person hears; ``whole_turn_ms``: to the answer's last audible
sample), ``measured_by`` says ``acoustic`` so the report can set these rows beside the traces' own.
``speech_end_from`` says where that end of speech came from: ``truth`` (the question's truth manifest,
``pipeline.records.truth``: where its user really finished) or ``vad`` (the run's VAD over the clip, for a
question without a truth); a file written before the column existed was measured from the VAD. A turn
that could not be measured is a row with ``ok`` false and ``error`` naming the file and the reason; a file
that could not be measured at all is one such row with no question (and no round). ``note`` is what was
noticed but did not stop the measurement (clipping), as the device rows' ``note`` is; ``recording`` the file
measured. A row read back also says where it was read (``where``: file:line), which is no column.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Final

from pipeline.records.schema import COUNT, MS, SECONDS, TEXT, meta, schema

MEASURED_BY = "acoustic"
FROM_TRUTH = "truth"  # the end of speech is the question's truth (truth.csv)
FROM_VAD = "vad"  # the end of speech is where the run's VAD ends the clip's speech
SPEECH_END_FROM = (FROM_TRUTH, FROM_VAD)
# what a file must have to be read as acoustic rows; the rest may be missing (an older or a hand-made file)
REQUIRED = ("run_id", "device", "question_id", "round", "first_audible_ms", "measured_by", "ok")
OPTIONAL_NUMBERS = ("speech_end_s", "first_audible_s", "last_audible_s", "whole_turn_ms", "rise_ms")
_TRAILING_NUMBER = re.compile(r"(\d+)$")


class AcousticError(ValueError):
    """Acoustic rows that cannot be read: the file, the line and the problem."""


@dataclass(frozen=True, slots=True)
class AcousticRow:
    """One turn as the recording tells it (the contract's columns, in order, then ``note``, ``recording``,
    ``speech_end_from`` and ``rise_ms``)."""

    run_id: Annotated[str, meta(TEXT, "the run the turn belongs to, where known (empty: matched by its turn)")]
    device: Annotated[
        str, meta(TEXT, "the recording's device: its file's stem (a number at its end: the device's index)")
    ]
    question_id: Annotated[str, meta(TEXT, "the question asked (empty: a file that could not be measured)")]
    round: Annotated[int | None, meta(COUNT, "the round, from 1 (empty: a file that could not be measured)")]
    speech_end_s: Annotated[float | None, meta(SECONDS, "the end of the user's speech, from the first sample")]
    first_audible_s: Annotated[float | None, meta(SECONDS, "the answer's first audible sample, from the first sample")]
    last_audible_s: Annotated[float | None, meta(SECONDS, "the answer's last audible sample, from the first sample")]
    first_audible_ms: Annotated[float | None, meta(MS, "end of user speech -> the answer's first audible sample")]
    whole_turn_ms: Annotated[float | None, meta(MS, "end of user speech -> the answer's last audible sample")]
    measured_by: Annotated[str, meta(TEXT, "`acoustic`: measured from the recording alone")]
    ok: Annotated[bool, meta(TEXT, "the turn was measured (`true` or `false`)")]
    error: Annotated[str, meta(TEXT, "why it could not be measured: the file and the reason")]
    note: Annotated[str, meta(TEXT, "what was noticed but did not stop the measurement (clipping)")] = ""
    recording: Annotated[str, meta(TEXT, "the file measured, so a reader can show its waveform")] = ""
    speech_end_from: Annotated[
        str,
        meta(
            TEXT,
            "where the end of speech came from: `truth` (the question's truth.csv) or `vad` (the run's VAD over "
            "the clip); empty: a file that could not be measured",
        ),
    ] = ""
    rise_ms: Annotated[
        float | None,
        meta(
            MS,
            "end of user speech -> where the answer rose 6 dB above the room's noise and the question's own tail "
            "(a level meter's onset); `first_audible_ms` is the answer's first audible sample, found back from "
            "here (with the speaker's feed, layout room-feed: found by its waveform; empty here where the answer "
            "never rose out of the noise): on a clean channel the two are one sample",
        ),
    ] = None
    where: str = field(default="", compare=False)  # file:line, where a reader read the row; no column

    @property
    def device_index(self) -> int:
        """The device's index: the number at the end of ``device`` (``device-2`` -> 2); 0 without one."""
        found = _TRAILING_NUMBER.search(self.device.strip())
        return int(found.group(1)) if found else 0


SCHEMA: Final = schema(AcousticRow)
COLUMNS: Final = tuple(c.name for c in SCHEMA)


def failed_row(
    device: str,
    error: str,
    question_id: str = "",
    round_no: int | None = None,
    note: str = "",
    speech_end_from: str = "",
) -> AcousticRow:
    """A turn (or a whole file, with no question) that could not be measured."""
    return AcousticRow(
        "",
        device,
        question_id,
        round_no,
        None,
        None,
        None,
        None,
        None,
        MEASURED_BY,
        False,
        error,
        note,
        speech_end_from=speech_end_from,
    )


def write_rows(path: Path, rows: Iterable[AcousticRow]) -> int:
    """Write the rows as CSV (header first); how many were written."""
    count = 0
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(COLUMNS)
        for row in rows:
            out.writerow(_cell(getattr(row, c)) for c in COLUMNS)
            count += 1
    return count


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(round(value, 9))  # a nanosecond: finer than any sample, shorter than float noise
    return str(value)


def read_rows(path: Path) -> list[AcousticRow]:
    """Every row of one acoustic CSV, each with ``where`` it was read; an unreadable file or a bad value ->
    ``AcousticError`` naming it."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:  # a spreadsheet's BOM too
            reader = csv.DictReader(f)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]
            if missing:
                raise AcousticError(f"{path}: not acoustic rows: no column {', '.join(missing)}")
            return [_row(line, f"{path}:{n}") for n, line in enumerate(reader, start=2)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise AcousticError(f"{path}: cannot read acoustic rows: {exc}") from None


def _number(text: str, where: str, name: str) -> float | None:
    if not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        raise AcousticError(f"{where}: {name} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise AcousticError(f"{where}: {name} {text!r} is not a finite number")
    return value


def _row(line: dict[str, str], where: str) -> AcousticRow:
    if line["measured_by"].strip() != MEASURED_BY:
        raise AcousticError(f"{where}: measured_by is {line['measured_by']!r}, not {MEASURED_BY!r}")
    ok = line["ok"].strip().lower()
    if ok not in ("true", "false", "1", "0"):
        raise AcousticError(f"{where}: ok {line['ok']!r} is neither true nor false")
    try:  # a file that could not be measured at all is one failed row with no question and no round
        rnd = int(line["round"]) if line["round"].strip() or ok not in ("false", "0") else None
    except ValueError:
        raise AcousticError(f"{where}: round {line['round']!r} is not a whole number") from None
    numbers = {name: _number(line.get(name) or "", where, name) for name in OPTIONAL_NUMBERS}
    question = line["question_id"].strip()
    return AcousticRow(
        run_id=line["run_id"].strip(),
        device=line["device"].strip(),
        question_id=question,
        round=rnd,
        first_audible_ms=_number(line["first_audible_ms"], where, "first_audible_ms"),
        measured_by=MEASURED_BY,
        ok=ok in ("true", "1"),
        error=(line.get("error") or "").strip(),
        note=(line.get("note") or "").strip(),
        recording=(line.get("recording") or "").strip(),
        speech_end_from=_speech_end_from(line.get("speech_end_from"), question, where),
        where=where,
        **numbers,
    )


def _speech_end_from(text: str | None, question: str, where: str) -> str:
    """The column as written; a file without it (written before it existed) took every end from the VAD."""
    if text is None:
        return FROM_VAD if question else ""
    value = text.strip()
    if value and value not in SPEECH_END_FROM:
        raise AcousticError(f"{where}: speech_end_from {text!r} is neither {' nor '.join(SPEECH_END_FROM)}")
    return value
