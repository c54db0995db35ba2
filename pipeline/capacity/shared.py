"""The centralised-against-distributed record: which capacity ramps are a shared LLM and which is a device's own.

A capacity folder (``capacity.json``) says how the silence grew with the devices one server held; it does
not say whether that server's LLM was one model shared by all of them or what a device with its own LLM
would do. ``crossover.json``, beside those folders, says so: the distributed figure's folder (a ramp of
one device against a server with a local LLM: what every device would have on its own hardware) and each
shared LLM's folder, each with what it was in words. The figures themselves are always read from the
capacity files (``crossover`` computes the crossing), never from this record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from pipeline.capacity import result
from pipeline.capacity.crossover import QUANTILES, Crossing, Curve, CurveError, Point, crossing, distributed

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


def curve_of(capacity: result.Capacity, name: str) -> Curve:
    """The silence against devices of a ramp's steps: every step but a void one (the generator itself fell
    behind: never counted), each with its measured P50 and P90."""
    points = [
        Point(s.devices, s.silence_ms.p50, s.silence_ms.p90)
        for s in capacity.steps
        if s.verdict != "void" and s.silence_ms.p50 is not None and s.silence_ms.p90 is not None
    ]
    return Curve(name, tuple(points))


@dataclass(frozen=True, slots=True)
class Shared:
    """One shared LLM's curve and where it crosses the distributed curve, on each quantile."""

    what: str
    curve: Curve
    crossings: tuple[Crossing, ...]  # one per QUANTILES


@dataclass(frozen=True, slots=True)
class Comparison:
    """Centralised against distributed, as read from a crossover record and its capacity folders."""

    path: Path
    device_what: str
    device: Curve  # measured at 1 device, estimated beyond
    shared: tuple[Shared, ...]


def _capacity(folder: Path, arm: Arm) -> result.Capacity:
    try:
        return result.read(folder / arm.folder / "capacity.json")
    except result.CapacityFileError as exc:
        raise RecordError(f"{folder / RECORD}: {exc}") from None


def compare(path: Path) -> Comparison:
    """The record at ``path`` with its capacity folders read and the crossings computed."""
    record, folder = read_record(path), path.parent
    try:
        single = curve_of(_capacity(folder, record.distributed), record.distributed.what).point(1)
        if single is None:
            raise RecordError(f"{path}: {record.distributed.folder} has no 1-device step: the distributed figure")
        curves = [(arm, _capacity(folder, arm)) for arm in record.shared]
        shared_curves = [(arm, curve_of(c, arm.what)) for arm, c in curves]
        everyone = sorted({n for _, c in shared_curves for n in c.devices})
        device = distributed(single, everyone, record.distributed.what)
        shared = tuple(
            Shared(arm.what, c, tuple(crossing(c, device, q) for q in QUANTILES)) for arm, c in shared_curves
        )
    except CurveError as exc:
        raise RecordError(f"{path}: {exc}") from None
    return Comparison(path, record.distributed.what, device, shared)


def find_records(files: Sequence[str], depth: int = 5) -> list[Path]:
    """Crossover records above these trace files: a ramp's step traces lie in DIR/<ramp>/steps/<N>/traces/."""
    found: dict[Path, None] = {}
    for name in files:
        for folder in list(Path(name).parents)[:depth]:
            if (folder / RECORD).is_file():
                found[folder / RECORD] = None
    return list(found)
