"""The fault matrix (issue 42): each case a server, a device emulator and one fault; the lab's server, or the real one.

    python scripts/fault_matrix.py [--cases kill-restart,cut-5,...] [--out DIR] [--list]
    python scripts/fault_matrix.py --real-server CHECKOUT [--gateway GW] [--venv DIR] [--cases ...] [--out DIR]
    python scripts/fault_matrix.py --compare LAB_DIR REAL_DIR [--out DIR]

Runs the cases (all by default; ``--list`` names them), prints each case's line as it ends, and writes
``DIR/faults.md`` (the table, then each case's commands and what the harness did) and ``DIR/faults.json``.
The network cuts and the full disk run in a namespace of their own and need root; without it they are rows
that say so. Each case's processes, logs and records stay under ``DIR/CASE/``.

With ``--real-server`` (a checkout of github:xinnan-tech/xiaozhi-esp32-server) the same cases run against
it instead (``pipeline/interop/fault_real.py``), in a venv of its own filled once with what its providers
import (``--venv``, default: the interop script's); the MQTT + UDP cases go through the real MQTT gateway
(``--gateway``, a checkout of github:xinnan-tech/xiaozhi-mqtt-gateway); a case it cannot have is a row that says
why.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from pipeline.interop import gateway as real_gateway
from pipeline.interop import real_server
from pipeline.interop.fault_cases import CASES, LAB, CaseResult, pick, run_cases
from pipeline.interop.fault_compare import side_by_side
from pipeline.interop.fault_kinds import FaultCase, against_real
from pipeline.interop.fault_result import HEAD, table_line
from pipeline.interop.process_group import InteropError, ProcessGroup


def real_cases(
    cases: list[FaultCase], checkout: Path, venv: Path | None, gateway: Path | None, out: Path
) -> list[FaultCase]:
    """The cases against the real server of ``checkout`` (and the gateway of ``gateway``), its venv made first
    where it is not yet."""
    folder = real_server.server_folder(checkout.resolve())
    gateway = real_gateway.gateway_folder(gateway.resolve()) if gateway is not None else None
    real_server.ensure_ffmpeg()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "voice-latency-lab"
    with ProcessGroup(out / "venv-logs", os.environ) as group:
        python = real_server.ensure_venv(folder, venv or cache / "xiaozhi-server-venv", group)
    return [against_real(case, folder, python, gateway) for case in cases]


def compare(folders: list[Path], out: Path) -> int:
    """``out/faults-side-by-side.md``: each folder's faults.json a side, named by the server it measured."""
    missing = [f for f in folders if not (f / "faults.json").is_file()]
    if missing:
        print(f"fault_matrix: no faults.json in {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    text = side_by_side([f / "faults.json" for f in folders])
    out.mkdir(parents=True, exist_ok=True)
    (out / "faults-side-by-side.md").write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default="all", help=f"comma-separated: {', '.join(CASES)}")
    parser.add_argument("--out", type=Path, default=Path("runs/faults"))
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository (its fixtures and configs)")
    parser.add_argument("--list", action="store_true", help="name the cases and stop")
    parser.add_argument("--real-server", type=Path, help="a checkout of github:xinnan-tech/xiaozhi-esp32-server")
    parser.add_argument("--venv", type=Path, help="the real server's venv (default: the interop script's)")
    parser.add_argument("--gateway", type=Path, help="with --real-server: a xiaozhi-mqtt-gateway checkout (UDP cases)")
    parser.add_argument(
        "--compare", nargs="+", type=Path, metavar="DIR", help="the matrices in these --out folders side by side"
    )
    args = parser.parse_args()
    if args.compare:
        return compare(args.compare, args.out)
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
    server = LAB
    if args.real_server is not None:
        try:
            cases = real_cases(cases, args.real_server, args.venv, args.gateway, args.out)
            server = "the real xiaozhi-esp32-server" + (" and MQTT gateway" if args.gateway else "")
        except InteropError as exc:
            print(f"fault_matrix: {exc}", file=sys.stderr)
            return 2
    print(HEAD, end="", flush=True)

    def said(result: CaseResult) -> None:
        print(table_line(result), end="", flush=True)

    command = shlex.join(["python", "scripts/fault_matrix.py", *sys.argv[1:]])
    results = run_cases(cases, args.out, os.environ, args.root.resolve(), command, said, server)
    print(f"\n{args.out / 'faults.md'}, {args.out / 'faults.json'}")
    return 0 if all(r.status == "run" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
