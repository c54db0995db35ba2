"""A run's output folder: ``traces/<run_id>.jsonl`` and the rows of ``bench.csv``, never merged by accident."""

from __future__ import annotations

from pathlib import Path

from pipeline.records.bench_csv import bench_run_ids


class RunExists(ValueError):
    """The output folder already holds this run id; appending would merge two runs silently."""


def refuse_existing_run(out: Path, run_id: str, append: bool) -> None:
    trace = out / "traces" / f"{run_id}.jsonl"
    found = trace.is_file() or run_id in bench_run_ids(out / "bench.csv")
    if found and not append:
        raise RunExists(
            f"{out} already holds run {run_id!r} ({trace if trace.is_file() else out / 'bench.csv'}): "
            "give another --run-id (or none for a fresh one), another --out, or --append to add turns to it"
        )
