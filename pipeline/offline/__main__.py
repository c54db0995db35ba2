"""``python -m pipeline.offline FIXTURES --out DIR [replay options]``: condition B', replayed offline, with a verdict.

Runs ``pipeline.replay`` in a network namespace with only loopback, under strace and a
Python audit hook, and prints whether anything tried to reach beyond loopback and which
component it was (as root, or with unprivileged user namespaces enabled).
Exit status: the replay's, or 3 when it ran but something reached out, or 4 when it ran but the
check could not be completed (a log missing or unreadable: the verdict is unknown, never assumed clean).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pipeline.offline.isolated_run import missing_tools, run_offline

ROOT = Path(__file__).resolve().parent.parent.parent


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.offline", description=__doc__.splitlines()[0])
    parser.add_argument("fixtures")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stacks", action="store_true", help="record stacks: name the library a native attempt used")
    args, extra = parser.parse_known_args(argv)
    missing = missing_tools()
    if missing:
        print(f"error: not installed: {', '.join(missing)}", file=sys.stderr)
        return 2
    code, result = run_offline(args.fixtures, args.out, extra, ROOT, os.environ, args.stacks)
    logs = args.out / "offline"
    if code != 0 and not (logs / "strace.log").exists():
        print("error: could not enter a network namespace (needs root or user namespaces)", file=sys.stderr)
        return code
    print(result.text())
    for problem in result.problems:
        print(f"warning: {problem}", file=sys.stderr)
    print(f"verdict: {logs / 'verdict.json'}")
    if code:
        return code
    return {True: 0, False: 3, None: 4}[result.fully_local]


if __name__ == "__main__":
    raise SystemExit(main())
