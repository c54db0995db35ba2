"""Acoustic rows beside a run (``python -m pipeline.acoustic measure ... --out ROWS.csv``), matched to its turns.

The rows are the turns measured from a recording alone (``measured_by`` = ``acoustic``), in the
device columns' names, read by their record's one reader (``pipeline.records.acoustic``). A row is
matched to the trace turn of the same run (where the row names one), device, question and round. A
recording's device is its file's stem: the number at its end is the device's index (``device-2`` -> 2);
a stem without a number is device 0, the one device of a run without several. A row with an empty
``run_id`` is matched where exactly one run has that turn. Every silence compared is the trace's minus the
recording's, each from the same end of speech: a row whose end is its question's truth (``speech_end_from``
= ``truth``) against the trace's silence from the true end (``true_end_first_audible_ms``; a turn without it
is not compared), any other row against the trace's silence from its VAD's end (``silence.silence_of``).
``Match.compared`` names the trace column compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.records.acoustic import FROM_TRUTH, AcousticError, AcousticRow, read_rows
from pipeline.records.turn_row import TurnRow
from pipeline.report.conditions import number
from pipeline.report.silence import Silence, silence_of

EMULATOR_TOLERANCE_MS = 5.0  # issue 33: the emulator's own recording; a room's is 20 ms
# --config: the run's own; its VAD decides where a question without a truth ends its speech (another VAD's end
# differed from the traces' by 60-120 ms on an emulator recording here, where the run's own agreed to 0.1 ms)
MEASURE_COMMAND = (
    "python -m pipeline.acoustic measure RECORDING... --questions audio_fixtures/ --config RUN.toml --out ROWS.csv"
)
TRUE_END_COLUMN = "true_end_first_audible_ms"  # the trace's silence from the question's truth


@dataclass(frozen=True, slots=True)
class Acoustic:
    """What the report was given: the rows, the files they came from, the tolerance and the recordings' folder."""

    rows: tuple[AcousticRow, ...]
    sources: tuple[str, ...]
    tolerance_ms: float = EMULATOR_TOLERANCE_MS
    recordings: Path | None = None  # DIR/<device>.wav, where a row names no recording

    def wav(self, row: AcousticRow) -> Path | None:
        """The recording a row was measured from, where known."""
        if row.recording:
            return Path(row.recording)
        return self.recordings / f"{row.device}.wav" if self.recordings else None


@dataclass(frozen=True, slots=True)
class Match:
    """A trace turn and the recording's measure of it."""

    trace: TurnRow
    row: AcousticRow

    @property
    def silence(self) -> Silence:
        """The trace's silence from the same end of speech as the row's, and its column: from the true end where
        the row's end of speech is the truth's, else from the VAD's end (``silence.silence_of``)."""
        if self.row.speech_end_from == FROM_TRUTH:
            return Silence(TRUE_END_COLUMN, number(self.trace.true_end_first_audible_ms))
        return silence_of(self.trace)

    @property
    def compared(self) -> str:
        """The trace column the recording's silence is compared with."""
        return self.silence.column

    @property
    def trace_ms(self) -> float | None:
        """The trace's silence in ``compared``; None where it has none."""
        return self.silence.ms

    @property
    def difference_ms(self) -> float | None:
        """Trace silence minus the recording's (ms); None where either has none."""
        mine, theirs = self.trace_ms, self.row.first_audible_ms
        return None if mine is None or theirs is None or not self.row.ok else mine - theirs


def load(
    paths: Sequence[Path], tolerance_ms: float = EMULATOR_TOLERANCE_MS, recordings: Path | None = None
) -> Acoustic:
    if tolerance_ms < 0:
        raise AcousticError(f"the tolerance {tolerance_ms} ms is negative")
    rows = [row for path in paths for row in read_rows(path)]
    return Acoustic(tuple(rows), tuple(map(str, paths)), tolerance_ms, recordings)


def _key(row: TurnRow) -> tuple[int, str, int | None]:
    return (row.device or 0, str(row.question_id), row.round)


def match(trace: Sequence[TurnRow], rows: Sequence[AcousticRow]) -> tuple[list[Match], list[tuple[AcousticRow, str]]]:
    """Each acoustic row with its trace turn, and the rows left unmatched with the reason."""
    index: dict[tuple[int, str, int | None], list[TurnRow]] = {}
    for t in trace:
        index.setdefault(_key(t), []).append(t)
    found: list[Match] = []
    unmatched: list[tuple[AcousticRow, str]] = []
    for row in rows:
        candidates = index.get((row.device_index, row.question_id, row.round), [])
        if row.run_id:
            candidates = [t for t in candidates if t.run_id == row.run_id]
        if len(candidates) == 1:
            found.append(Match(candidates[0], row))
        elif not candidates:
            unmatched.append((row, "no trace turn of that device, question and round"))
        else:
            runs = ", ".join(sorted({t.run_id for t in candidates}))
            unmatched.append((row, f"several runs have that turn ({runs}) and the row names none"))
    return found, unmatched
