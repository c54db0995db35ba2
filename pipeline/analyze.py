"""``python -m pipeline.analyze PATH``: recompute bench rows and the summary from trace files alone.

PATH is a trace file or a folder of them (``*.jsonl``, OTLP JSON lines). Unreadable files and
lines are listed, never silently dropped, and the rest is read.

The files are read as the report reads them (``analysis.read.read_traces``): a fleet's files by a
process per core, each turn's row made where its spans were read, so the spans never pile up in one
process. Every turn span gets its row, as a run's bench.csv gives it: a server's turn joined to its
device's turn too (both ends' rows, the device's split by its server's spans). The report's rows.csv
folds the two into the device's row instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pipeline.analysis.read import cyclic_gc_paused, read_traces
from pipeline.analysis.summary import summary_table
from pipeline.analysis.traces import trace_files
from pipeline.records.bench_csv import BenchCsv, BenchCsvError


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.analyze", description=__doc__.splitlines()[0])
    p.add_argument("path", type=Path, help="trace file or folder of trace files")
    p.add_argument("--csv", type=Path, help="append the rows to this bench.csv (every turn span's own row)")
    args = p.parse_args(argv)
    if not args.path.exists():
        print(f"error: {args.path}: not found", file=sys.stderr)
        return 2
    files = trace_files(args.path)
    if not files:
        print(f"error: {args.path}: no trace files (*.jsonl)", file=sys.stderr)
        return 2
    with cyclic_gc_paused():
        read = read_traces(files, keep_joined=True)
        rows = read.rows
    for message in read.problems:
        print(f"warning: {message}", file=sys.stderr)
    if args.csv:
        try:
            BenchCsv(args.csv).append_lines(f.csv_line for f in read.facts if f.csv_line is not None)
        except BenchCsvError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    print(summary_table(rows) if rows else "no turns found")
    print(f"{len(rows)} turn(s) from {len(files)} file(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
