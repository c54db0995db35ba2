"""The command line of ``scripts/interop/xiaozhi_server.py --capacity``, and the questions a ramp asks.

In capacity mode each server (the real one over WebSocket, through the real MQTT gateway with
``--gateway``, and ``pipeline.serve``) is ramped by ``pipeline.capacity`` in place of the
one-question-at-a-time interop run, on the fixed-latency stand-ins of
``configs/capacity-services.toml`` (the oracle ASR, told each upload's question by
``endpoints/speech/heard.py``; the stub TTS) and the emulated cloud with a compute profile.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.interop.process_group import InteropError
from pipeline.records.truth import TRUTH, read_truth, write_truth


@dataclass(frozen=True, slots=True)
class CapacityRun:
    """What a capacity-mode invocation was asked for, as its table's introduction states it."""

    steps: str
    hold: str
    margin: str
    profile: Path | None
    fixtures: Path  # as given
    exclude: str
    services_config: Path
    cloud_profile: str
    min_turns: int | None = None


def capacity_intro(args: CapacityRun, fixtures: Path) -> str:
    left_out = f" less {args.exclude}" if args.exclude else ""
    return (
        "# How many devices does each server hold?\n\n"
        f"Each server ramped by `python -m pipeline.capacity` at {args.steps} device(s), each step held "
        f"{args.hold}{f', margin {args.margin}' if args.margin else ''}"
        f"{f', at least {args.min_turns} turns a step' if args.min_turns else ''}"
        f"{f', load profile {args.profile}' if args.profile else ''}; fixtures {args.fixtures.name}{left_out} "
        f"({fixtures}). Every server on the same services: the lab's speech services as fixed-latency stand-ins "
        f"({args.services_config.name}: the oracle ASR, which hears each upload's question from its audio, and the "
        f"stub TTS) and the emulated cloud, compute profile {args.cloud_profile} (estimated), through the lab's LLM "
        "relay. `devices held` and `grew first` are as `pipeline.capacity` printed them; the CPU columns are each "
        "process's mean over the whole ramp, in percent of one core, from /proc (this machine has "
        f"{os.cpu_count()} cores).\n\n"
    )


def fixtures_without(folder: Path, exclude: str, target: Path) -> Path:
    """A fixtures folder like ``folder`` without the questions ``exclude`` names: its manifest filtered, the audio
    linked, not copied, and the truth of the clips kept (``truth.csv``, where the folder has one). An id that is
    not in the manifest is an error (a typo would silently leave it in)."""
    manifest = folder / "manifest.csv"
    if not manifest.is_file():
        raise InteropError(f"--exclude needs a manifest.csv in {folder}")
    drop = {q.strip() for q in exclude.split(",") if q.strip()}
    with manifest.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        rows, fields = list(reader), reader.fieldnames or []
    unknown = sorted(drop - {row["id"] for row in rows})
    if unknown:
        raise InteropError(f"--exclude: {', '.join(unknown)} not in {manifest}")
    kept = [row for row in rows if row["id"] not in drop]
    if not kept:
        raise InteropError(f"--exclude leaves no question of {manifest}")
    target.mkdir(parents=True, exist_ok=True)
    with (target / "manifest.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(kept)
    for row in kept:
        link = target / row["audio"]
        if not link.exists():
            link.symlink_to((folder / row["audio"]).resolve())
    if (folder / TRUTH).is_file():
        truths = read_truth(folder / TRUTH)
        write_truth(target / TRUTH, [truths[row["audio"]] for row in kept if row["audio"] in truths])
    return target
