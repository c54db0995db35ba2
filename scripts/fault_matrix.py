"""The fault matrix of the lab's server (issue 42): each case a server, a device emulator and one fault.

    python scripts/fault_matrix.py [--cases kill-restart,cut-5,...] [--out DIR] [--list]

Runs the cases (all by default; ``--list`` names them), prints each case's line as it ends, and writes
``DIR/faults.md`` (the table, then each case's commands and what the harness did) and ``DIR/faults.json``.
The network cuts and the full disk run in a namespace of their own and need root; without it they are rows
that say so. Each case's processes, logs and records stay under ``DIR/CASE/``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from pipeline.interop.fault_cases import CASES, CaseResult, pick, run_cases
from pipeline.interop.fault_result import HEAD, table_line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default="all", help=f"comma-separated: {', '.join(CASES)}")
    parser.add_argument("--out", type=Path, default=Path("runs/faults"))
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository (its fixtures and configs)")
    parser.add_argument("--list", action="store_true", help="name the cases and stop")
    args = parser.parse_args()
    if args.list:
        for case in CASES.values():
            print(f"{case.name}: {case.title}")
        return 0
    if not (args.root / "audio_fixtures").is_dir():
        print(
            f"fault_matrix: {args.root.resolve()} has no audio_fixtures: give the repository with --root",
            file=sys.stderr,
        )
        return 2
    try:
        cases = pick(args.cases)
    except ValueError as exc:
        print(f"fault_matrix: {exc}", file=sys.stderr)
        return 2
    print(HEAD, end="", flush=True)

    def said(result: CaseResult) -> None:
        print(table_line(result), end="", flush=True)

    command = shlex.join(["python", "scripts/fault_matrix.py", *sys.argv[1:]])
    results = run_cases(cases, args.out, os.environ, args.root.resolve(), command, said)
    print(f"\n{args.out / 'faults.md'}, {args.out / 'faults.json'}")
    return 0 if all(r.status == "run" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
