"""``python -m pipeline.report PATH...`` or ``--jaeger URL``: the comparison report (METHOD M1-M23).

PATH is an experiment folder (its ``traces/*.jsonl``, or every ``*.jsonl`` under it) or trace
files. Writes report.md (+ plots/), report.html (self-contained) and rows.csv, the rows the report
was computed from in bench.csv's format (``output``), into ``--out`` (default: PATH/report for one
folder, else ./report).

Exit status: 0 report written; 1 report written but no turn was found; 3 report written but
the comparison was refused (M11); 2 nothing written (bad arguments, unreadable source).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NoReturn

from pipeline.analysis.read import cyclic_gc_paused
from pipeline.records.acoustic import AcousticError
from pipeline.report.acoustic_match import EMULATOR_TOLERANCE_MS, Acoustic
from pipeline.report.acoustic_match import load as load_acoustic
from pipeline.report.document import Document
from pipeline.report.jaeger import JaegerQuery, load_jaeger
from pipeline.report.load import Dataset, LoadError, load_paths
from pipeline.report.output import write


def _when(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipeline.report", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="*", type=Path, help="experiment folder or trace files (*.jsonl)")
    p.add_argument("--jaeger", metavar="URL", help="read traces from Jaeger's /api/v3/traces, e.g. http://HOST:16686")
    p.add_argument("--service", default="voice-latency-lab", help="Jaeger service name (default: %(default)s)")
    p.add_argument("--start", type=_when, help="Jaeger: earliest trace start, RFC 3339 (default: 24 h before --end)")
    p.add_argument("--end", type=_when, help="Jaeger: latest trace start, RFC 3339 (default: now)")
    p.add_argument("--search-depth", type=int, default=1000, help="Jaeger: most traces to fetch (one per run)")
    p.add_argument("--run", action="append", default=[], metavar="RUN_ID", help="only this run (repeatable)")
    p.add_argument("--out", type=Path, help="output folder")
    p.add_argument("--no-plots", action="store_true", help="skip the plots (faster)")
    p.add_argument(
        "--acoustic",
        action="append",
        default=[],
        type=Path,
        metavar="ROWS.csv",
        help="turns measured from recordings (python -m pipeline.acoustic measure): checked against the traces",
    )
    p.add_argument("--recordings", type=Path, metavar="DIR", help="the recordings (DIR/<device>.wav), for the waveform")
    p.add_argument(
        "--acoustic-tolerance-ms",
        type=float,
        default=EMULATOR_TOLERANCE_MS,
        metavar="MS",
        help="trace and recording agree within this (default: %(default)s, the emulator's own recording; a room: 20)",
    )
    args = p.parse_args(argv)
    if bool(args.paths) == bool(args.jaeger):
        p.error("give trace paths or --jaeger URL (one of the two)")
    return args


def load(args: argparse.Namespace) -> Dataset:
    if args.jaeger:
        end = args.end or datetime.now(UTC)
        start = args.start or end - timedelta(hours=24)
        query = JaegerQuery(args.jaeger, args.service, start, end, args.search_depth)
        return load_jaeger(query, tuple(args.run))
    return load_paths(args.paths, tuple(args.run), meanwhile=_import_build)


# The report's own code (the sections, matplotlib) took 0.35-0.41 s to import after what this module
# imports (timed around ``import pipeline.report.build``): imported while forked readers read the trace
# files, in this otherwise waiting process, not before they start.
_BUILD = "pipeline.report.build"


def _import_build() -> None:
    importlib.import_module(_BUILD)


def build(data: Dataset, draw: bool, acoustic: Acoustic | None = None) -> Document:
    """The report of ``data`` (``pipeline.report.build``, imported by now where trace files were read)."""
    built: Document = importlib.import_module(_BUILD).build(data, draw=draw, acoustic=acoustic)
    return built


def default_out(args: argparse.Namespace) -> Path:
    if args.out:
        return Path(args.out)
    if len(args.paths) == 1 and args.paths[0].is_dir():
        return Path(args.paths[0]) / "report"
    return Path("report")


def main(argv: Sequence[str] | None = None) -> int:
    return report(argv)[0]


def report(argv: Sequence[str] | None = None) -> tuple[int, Dataset | None]:
    """``main``, and the dataset it read (None when it read none): ``exit_now`` leaves it to the OS to free."""
    args = parse(argv)
    with cyclic_gc_paused():  # back on once the report is written: until then it would only walk the dataset
        try:
            acoustic = (
                load_acoustic(args.acoustic, args.acoustic_tolerance_ms, args.recordings) if args.acoustic else None
            )
            data = load(args)
        except (LoadError, AcousticError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2, None
        doc = build(data, draw=not args.no_plots, acoustic=acoustic)
        try:
            written = write(doc, data, default_out(args))
        except OSError as exc:
            print(f"error: cannot write the report: {exc}", file=sys.stderr)
            return 2, data
    for problem in data.problems:
        print(f"warning: {problem}", file=sys.stderr)
    print(f"{len(data.rows)} turn(s), {len(data.runs)} run(s): {'complete' if doc.complete else 'INCOMPLETE'}")
    print(f"report: {written.markdown}\nhtml:   {written.html}\nrows:   {written.rows_csv}")
    if not data.rows:
        return 1, data
    return (0 if doc.comparable else 3), data


def exit_now(status: int) -> NoReturn:
    """The command's end: its output flushed, then the process gone without the interpreter's teardown.
    Freeing a fleet's dataset object by object took 0.21 s (100,000 turns) and the teardown after it about
    0.1 s more, measured here; the OS takes the memory back at once. Every file was written and closed by
    ``write``, and the report sets no exit handlers."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    _status, _data = report()  # _data held until the process is gone
    exit_now(_status)
