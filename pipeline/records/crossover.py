"""The crossover record: which capacity ramps are a shared LLM and which is a device's own (``crossover.json``),
with its one writer and its one reader.

A capacity folder (``capacity.json``) says how the silence grew with the devices one server held; it does
not say whether that server's LLM was one model shared by all of them or what a device with its own LLM
would do. ``crossover.json``, beside those folders, says so: the distributed figure's folder (a ramp of
one device against a server with a local LLM: what every device would have on its own hardware) and each
shared LLM's folder, each with what it was in words. The figures themselves are always read from the
capacity files (``pipeline.analysis.crossing`` computes the crossing), never from this record.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

RECORD = "crossover.json"
SCHEMA = 1


class Arm(msgspec.Struct, frozen=True):
    """One capacity folder (relative to the record) and what it measured, in words."""

    folder: str
    what: str


class Record(msgspec.Struct, frozen=True):
    """The distributed figure's ramp and the shared LLMs' ramps."""

    distributed: Arm
    shared: list[Arm]
    schema: int = SCHEMA


class RecordError(ValueError):
    """A crossover record, or a capacity folder it names, that cannot be read: names the file and the problem."""


def write_record(folder: Path, record: Record) -> Path:
    path = folder / RECORD
    path.write_bytes(msgspec.json.format(msgspec.json.encode(record), indent=2) + b"\n")
    return path


def read_record(path: Path) -> Record:
    try:
        record = msgspec.json.decode(path.read_bytes(), type=Record)
    except OSError as exc:
        raise RecordError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except msgspec.DecodeError as exc:
        raise RecordError(f"{path}: not a crossover record ({exc})") from None
    if record.schema != SCHEMA:
        raise RecordError(f"{path}: schema {record.schema}, this reader knows {SCHEMA}")
    if not record.shared:
        raise RecordError(f"{path}: names no shared LLM's ramp")
    return record
