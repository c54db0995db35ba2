"""The silence a person hears: end of user speech -> the answer's first audible sound, per turn.

A device's turn (over a transport) has it as ``first_audible_ms``: the first frame with sound in
it began to play on the device. In one process the playback starts with the first synthesised
frame, so its ``first_audio_ms`` is that moment (section 2c's path to the first audible point ends
there too). One rule for every section that shows the silence: the first table, cold vs warm, and
the recording's check, which also names the column (``silence_of``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from pipeline.records.turn_row import TurnRow
from pipeline.report.conditions import number

COLUMN_NOTE = (
    "silence: end of user speech -> first audible sound (a device's `first_audible_ms`; in one process "
    "`first_audio_ms`, the playback's start)"
)


class Silence(NamedTuple):
    """A turn's silence: the column it is read from and its value in ms (None where the spans do not give it)."""

    column: str
    ms: float | None


def silence_of(row: TurnRow) -> Silence:
    """The turn's silence and the column it comes from: a device's turn has its first audible sample (a device
    that heard nothing still has no silence, never its server's playback start), one process its playback's start."""
    if row.transport or row.first_audible_ms is not None:
        return Silence("first_audible_ms", number(row.first_audible_ms))
    return Silence("first_audio_ms", number(row.first_audio_ms))


INFERRED_NOTE = (
    "a call to a voice bot (`answer_edges = inferred`): each answer's first and last audible sample are found from "
    "its sound as a phone's playout buffer plays it, and an answer ends after a 700 ms pause; Twilio's wire marks "
    "no answer, and on Pipecat's the bot's own marks are kept beside what was heard, not used"
)


def inferred(rows: Iterable[TurnRow]) -> int:
    """How many of ``rows`` had their answer's edges inferred from the sound rather than told by the server."""
    return sum(1 for r in rows if r.answer_edges == "inferred")


def silence_ms(row: TurnRow) -> float | None:
    """The turn's silence in ms, or None where its spans do not give it."""
    return silence_of(row).ms


def sorted_silences(rows: Iterable[TurnRow]) -> np.ndarray:
    """The silences of ``rows`` that have one, sorted (float64)."""
    return np.sort(np.asarray([v for r in rows if (v := silence_ms(r)) is not None], dtype=np.float64))
