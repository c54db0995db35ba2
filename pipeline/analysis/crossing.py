"""Centralised against distributed, as numbers (METHOD M21 (3)): where one shared LLM stops being quieter
than every device having its own; and a crossover record (``pipeline.records.crossover``) read with the
capacity folders it names, the crossings computed (``compare``), for the report and the bench.

The shared side is a measured curve: the silence (end of speech -> first audible, ``first_audible_ms``)
P50 and P90 against the number of devices one server with one LLM serves (a capacity ramp's steps). The
distributed side is every device with its own on-device LLM: no device waits for another's, so its figure
is the single-device one. It is measured at one device; for more devices it is an ESTIMATE equal to that
figure (each device brings its own hardware; what it does not show: a home's shared Wi-Fi, heat), and is
labelled so (M12).

The crossing is the headcount where the shared curve first reaches the distributed figure from below,
linearly interpolated between the two measured steps around it. It is labelled measured only where
nothing in it is estimated: it falls on a measured step and the distributed figure there is measured
(one device); otherwise estimated, with the reasons. When the shared LLM is quieter at every measured
step, there is no crossing within the measured range; when it is no quieter from the first step, the
devices' own LLMs are as quiet or quieter throughout. The curves and crossings are pure (no files, no
clock); ``compare`` reads the files they come from.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.records.crossover import RECORD, Arm, RecordError, read_record
from pipeline.records.ramp_result import Capacity, CapacityFileError
from pipeline.records.ramp_result import read as read_capacity

MEASURED = "measured"
ESTIMATED = "estimated"
QUANTILES = ("p50", "p90")

# What a crossing says, in kind
CROSSES = "crosses"  # the shared LLM is quieter at first, then reaches the distributed figure
NO_CROSSING = "no crossing"  # quieter at every measured step: no crossing within the measured range
NEVER_QUIETER = "never quieter"  # no quieter from the first measured step


class CurveError(ValueError):
    """A curve that cannot be read: names the curve, the step and the problem."""


@dataclass(frozen=True, slots=True)
class SilenceAt:
    """The silence at one headcount: P50 and P90 in ms, and whether they were measured or estimated."""

    devices: int
    p50_ms: float
    p90_ms: float
    label: str = MEASURED

    def at(self, quantile: str) -> float:
        if quantile not in QUANTILES:
            raise ValueError(f"quantile {quantile!r}: choose one of {', '.join(QUANTILES)}")
        return self.p50_ms if quantile == "p50" else self.p90_ms


@dataclass(frozen=True, slots=True)
class Curve:
    """Silence against devices for one architecture; its points by strictly increasing headcount."""

    name: str
    points: tuple[SilenceAt, ...]

    def __post_init__(self) -> None:
        if not self.points:
            raise CurveError(f"{self.name}: no step with a silence figure")
        previous = 0
        for p in self.points:
            if p.devices <= previous:
                raise CurveError(f"{self.name}: {p.devices} devices after {previous}: steps must increase, from 1 up")
            if not (p.p50_ms >= 0 and p.p90_ms >= 0):
                raise CurveError(f"{self.name}, {p.devices} devices: silence {p.p50_ms}/{p.p90_ms} ms is not >= 0")
            if p.label not in (MEASURED, ESTIMATED):
                raise CurveError(
                    f"{self.name}, {p.devices} devices: label {p.label!r} is neither measured nor estimated"
                )
            previous = p.devices

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(p.devices for p in self.points)

    def point(self, devices: int) -> SilenceAt | None:
        return next((p for p in self.points if p.devices == devices), None)


def distributed(single: SilenceAt, devices: Iterable[int], name: str = "each device its own LLM") -> Curve:
    """The distributed curve over ``devices``: the single-device figure, measured at 1, estimated beyond."""
    if single.devices != 1 or single.label != MEASURED:
        raise CurveError(f"{name}: the distributed figure is the one measured with 1 device, not {single}")
    counts = sorted({1, *devices})
    if counts[0] < 1:
        raise CurveError(f"{name}: {counts[0]} devices: a headcount is at least 1")
    return Curve(
        name, tuple(SilenceAt(n, single.p50_ms, single.p90_ms, MEASURED if n == 1 else ESTIMATED) for n in counts)
    )


@dataclass(frozen=True, slots=True)
class Crossing:
    """Where the shared curve reaches the distributed one, on one quantile."""

    quantile: str
    kind: str  # CROSSES, NO_CROSSING or NEVER_QUIETER
    devices: float | None  # the headcount where they cross; None unless kind is CROSSES
    label: str  # measured or estimated (of ``devices``); "" when there is none
    between: tuple[int, int] | None  # the measured steps it lies between (equal when on a step)
    reasons: tuple[str, ...]  # why it is estimated
    last_step: int  # the largest headcount measured

    @property
    def quieter_up_to(self) -> int | None:
        """The most devices at which the shared LLM is still quieter (None when it never is)."""
        if self.kind == NEVER_QUIETER:
            return None
        if self.kind == NO_CROSSING or self.devices is None:
            return self.last_step
        whole = int(self.devices)
        return whole - 1 if whole == self.devices else whole


def crossing(shared: Curve, device: Curve, quantile: str) -> Crossing:
    """Where ``shared`` first reaches ``device`` (the distributed curve) on ``quantile``, over the shared
    curve's steps; ``device`` must have a point at each of them (``distributed`` makes one)."""
    gaps = []  # (devices, shared - distributed, the distributed point)
    for p in shared.points:
        own = device.point(p.devices)
        if own is None:
            raise CurveError(f"{device.name}: no figure at {p.devices} devices, where {shared.name} was measured")
        gaps.append((p.devices, p.at(quantile) - own.at(quantile), own, p))
    last = shared.points[-1].devices
    if gaps[0][1] >= 0:
        return Crossing(quantile, NEVER_QUIETER, None, "", None, (), last)
    for (n0, d0, _, _), (n1, d1, own, point) in itertools.pairwise(gaps):
        if d1 < 0:
            continue
        at = n1 - (n1 - n0) * d1 / (d1 - d0)  # linear between the two steps; d0 < 0 <= d1
        reasons = []
        if d1 > 0:
            reasons.append(f"interpolated between the measured steps {n0} and {n1}")
        if own.label == ESTIMATED:
            reasons.append(f"the distributed figure at {n1} devices is an estimate: the single-device figure")
        if point.label == ESTIMATED:
            reasons.append(f"the shared figure at {n1} devices is an estimate")
        between = (n1, n1) if d1 == 0 else (n0, n1)
        return Crossing(quantile, CROSSES, at, ESTIMATED if reasons else MEASURED, between, tuple(reasons), last)
    return Crossing(quantile, NO_CROSSING, None, "", None, (), last)


def describe(c: Crossing, shared: str) -> str:
    """The crossing in one sentence, its label named."""
    q = c.quantile.upper()
    if c.kind == NEVER_QUIETER:
        return f"{q}: {shared} is no quieter than a device's own LLM from the first measured step."
    if c.kind == NO_CROSSING or c.devices is None:
        return f"{q}: no crossing within the measured range; {shared} is quieter up to {c.last_step} devices."
    text = f"{q}: {shared} reaches a device's own LLM at {c.devices:.1f} devices ({c.label}"
    return text + (f": {'; '.join(c.reasons)})." if c.reasons else ").")


def headcounts(curves: Sequence[Curve]) -> tuple[int, ...]:
    """Every headcount any of ``curves`` has a point at, increasing."""
    return tuple(sorted({p.devices for c in curves for p in c.points}))


def curve_of(capacity: Capacity, name: str) -> Curve:
    """The silence against devices of a ramp's steps: every step but a void one (the generator itself fell
    behind: never counted), each with its measured P50 and P90."""
    points = [
        SilenceAt(s.devices, s.silence_ms.p50, s.silence_ms.p90)
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


def _capacity(folder: Path, arm: Arm) -> Capacity:
    try:
        return read_capacity(folder / arm.folder / "capacity.json")
    except CapacityFileError as exc:
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
