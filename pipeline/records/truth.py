"""The truth manifest: where the user of each clip really started and finished speaking, and every pause
inside the question, known by construction (the clip was built from its parts, or its silence is digital
zeros) and never by a VAD, so that an endpointer can be scored against it.

``truth.csv`` sits beside a fixtures folder's manifest, one line a clip, with exactly the columns
``audio, speech_start_ms, speech_end_ms, pauses``:

- ``audio``: the clip's file name, relative to the folder (as the manifest's ``audio`` column names it);
- ``speech_start_ms``, ``speech_end_ms``: the question's first speech sample and the end of its last one, in
  milliseconds from the clip's first sample; ``speech_end_ms`` is where the user really finished;
- ``pauses``: empty, or ``start-end;start-end`` (ms) for every pause inside the question, in order.

A time is a boundary between samples: speech is the samples ``[start, end)``, a pause the silent samples
``[start, end)`` between two speech samples. Times are written with up to 4 decimals, which a 16 kHz sample
(0.0625 ms) needs and never exceeds. Written by ``scripts/make_fixtures.py``; read by the fixtures loader
(``pipeline.settings.fixtures``), which gives each question its truth.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

TRUTH = "truth.csv"
COLUMNS = ("audio", "speech_start_ms", "speech_end_ms", "pauses")
# 4 decimals written: a time read back may sit this far past the exact one, so a clip's end allows it
_ROUNDING_MS = 0.00005


@dataclass(frozen=True, slots=True)
class Pause:
    """A silence inside the question, between two of its speech samples (ms from the clip's first sample)."""

    start_ms: float
    end_ms: float

    @property
    def duration_ms(self) -> float:
        return self.end_ms - self.start_ms


@dataclass(frozen=True, slots=True)
class Truth:
    """Where one clip's question really starts and ends, and the pauses inside it (ms from its first sample)."""

    audio: str
    speech_start_ms: float
    speech_end_ms: float
    pauses: tuple[Pause, ...] = ()


class TruthError(ValueError):
    """A truth manifest that cannot be trusted; the message is always ``<file>:<line>: <problem>``."""


def read_truth(path: Path, durations_ms: Mapping[str, float] | None = None) -> dict[str, Truth]:
    """``path``'s truths by audio name, each checked; ``durations_ms`` (audio name -> the clip's length) also
    refuses a time past its clip's end (a clip it does not name is not checked for length)."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as fh:
            rows = list(csv.reader(fh))
    except UnicodeDecodeError as exc:
        raise TruthError(f"{path}:1: not UTF-8 text ({exc})") from None
    if not rows or tuple(cell.strip() for cell in rows[0]) != COLUMNS:
        found = ", ".join(rows[0]) if rows else "nothing"
        raise TruthError(f"{path}:1: the columns must be exactly {', '.join(COLUMNS)}; found {found}")
    truths: dict[str, Truth] = {}
    lines: dict[str, int] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue  # a blank line carries no clip
        where = f"{path}:{line}"
        truth = _parse(row, where)
        if truth.audio in truths:
            raise TruthError(f"{where}: audio {truth.audio!r} already has a truth on line {lines[truth.audio]}")
        duration = (durations_ms or {}).get(truth.audio)
        _check(truth, where, duration)
        truths[truth.audio], lines[truth.audio] = truth, line
    return truths


def write_truth(path: Path, truths: Iterable[Truth]) -> None:
    """``truths`` written to ``path`` in the order given, each checked first: a truth that would not read back
    is never written."""
    rows = [list(COLUMNS)]
    seen: set[str] = set()
    for line, truth in enumerate(truths, start=2):
        where = f"{path}:{line}"
        if truth.audio in seen:
            raise TruthError(f"{where}: audio {truth.audio!r} already has a truth")
        seen.add(truth.audio)
        _check(truth, where, None)
        pauses = ";".join(f"{_ms(p.start_ms)}-{_ms(p.end_ms)}" for p in truth.pauses)
        rows.append([truth.audio, _ms(truth.speech_start_ms), _ms(truth.speech_end_ms), pauses])
    with path.open("w", encoding="utf-8", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)


def _ms(value: float) -> str:
    """Fixed-point, never an exponent (``-`` separates a pause's times), trailing zeros dropped."""
    return f"{value:.4f}".rstrip("0").rstrip(".")


def _said(number: int, pause: Pause) -> str:
    return f"pause {number} ({_ms(pause.start_ms)}-{_ms(pause.end_ms)} ms)"


def _number(text: str, what: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TruthError(f"{where}: {what} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise TruthError(f"{where}: {what} {text!r} is not a finite number")
    return value


def _parse(row: list[str], where: str) -> Truth:
    if len(row) != len(COLUMNS):
        raise TruthError(f"{where}: {len(row)} cells where the columns are {len(COLUMNS)} ({', '.join(COLUMNS)})")
    audio, start, end, pauses = (cell.strip() for cell in row)
    if not audio:
        raise TruthError(f"{where}: empty audio name")
    parsed = []
    for number, span in enumerate(filter(None, (s.strip() for s in pauses.split(";"))), start=1):
        first, dash, last = span.partition("-")
        if not dash:
            raise TruthError(f"{where}: pause {number} {span!r} is not start-end")
        what = f"pause {number}"
        parsed.append(Pause(_number(first, f"{what} start", where), _number(last, f"{what} end", where)))
    return Truth(
        audio,
        _number(start, "speech_start_ms", where),
        _number(end, "speech_end_ms", where),
        tuple(parsed),
    )


def _check(truth: Truth, where: str, duration_ms: float | None) -> None:
    """The rules a truth keeps, the first one broken refused; the clip's length first, so that a time past
    the clip is said to be that rather than anything it breaks besides."""
    start, end = truth.speech_start_ms, truth.speech_end_ms
    if duration_ms is not None:
        # the pauses before the speech's end, which lies past any of them: a pause outside its clip is named
        times = [(f"speech_start_ms {_ms(start)}", start)]
        times += [(_said(n, p), p.end_ms) for n, p in enumerate(truth.pauses, start=1)]
        times += [(f"speech_end_ms {_ms(end)}", end)]
        for what, time in times:
            if time > duration_ms + _ROUNDING_MS:
                clip = f"clip {truth.audio!r} ({_ms(duration_ms)} ms)"
                raise TruthError(f"{where}: {what} lies outside its clip: past the end of {clip}")
    if start < 0:
        raise TruthError(f"{where}: speech_start_ms {_ms(start)} is before the clip's first sample")
    if end <= start:
        raise TruthError(f"{where}: speech_end_ms {_ms(end)} is not after speech_start_ms {_ms(start)}")
    previous: Pause | None = None
    for number, pause in enumerate(truth.pauses, start=1):
        said = _said(number, pause)
        if pause.end_ms <= pause.start_ms:
            raise TruthError(f"{where}: {said} does not end after it starts")
        # a pause lies between two speech samples, so it can neither begin nor end the question
        if pause.start_ms <= start or pause.end_ms >= end:
            raise TruthError(f"{where}: {said} is not inside the question ({_ms(start)}-{_ms(end)} ms)")
        if previous is not None and pause.start_ms < previous.start_ms:
            raise TruthError(f"{where}: {said} is out of order: it starts before pause {number - 1}")
        if previous is not None and pause.start_ms <= previous.end_ms:
            # touching pauses are one pause with no speech between them: written as two, one is wrong
            raise TruthError(f"{where}: {said} overlaps or touches pause {number - 1}")
        previous = pause
