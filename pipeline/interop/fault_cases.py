"""The fault matrix (issue 42): each case a real server, a real device emulator and one fault, checked afterwards.

``run_case`` runs one case (``fault_kinds.CASES``) where it must: in a network and mount namespace of its own
for a network cut or a full disk (``fault_namespace``), on this machine otherwise (``fault_run``). Each gives a
``CaseResult``: what the device saw, what its rows say against the turns planned (``fault_ledger``: every turn
in exactly one row), how long until it was answered again, whether the traces recompute bench.csv's rows, and
what was left behind (``fault_leftovers``). ``run_cases`` runs several and keeps ``faults.md`` and
``faults.json`` written after each, so a case that fails later loses nothing of the ones before.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.interop.fault_kinds import CASES, FaultCase, pick
from pipeline.interop.fault_namespace import run_in_namespace
from pipeline.interop.fault_real import why_not
from pipeline.interop.fault_result import CaseResult, table, write_json
from pipeline.interop.fault_run import run_here

LAB = "the lab's server"
__all__ = ["CASES", "CaseResult", "FaultCase", "pick", "run_case", "run_cases"]


def run_case(case: FaultCase, out: Path, environment: Mapping[str, str], root: Path) -> CaseResult:
    """One case, its folder ``out/NAME``; ``root``: the repository (its fixtures and configs)."""
    if case.server == "real" and (why := why_not(case)):
        return CaseResult(case.name, case.title, status=f"not run: {why}")
    if case.namespace:
        return run_in_namespace(case, out, environment, root)
    return run_here(case, out, environment, root)


def _machine(root: Path) -> dict[str, Any]:
    git = ["git", "-C", str(root)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    return {
        "commit": head + ("+changes" if dirty.stdout.strip() else ""),
        "cores": os.cpu_count(),
        "load_1m_at_start": round(os.getloadavg()[0], 2),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def run_cases(
    cases: Sequence[FaultCase],
    out: Path,
    environment: Mapping[str, str],
    root: Path,
    command: str,
    said: Callable[[CaseResult], object] = lambda r: None,
    server: str = LAB,
) -> list[CaseResult]:
    """Each case in turn; ``out/faults.md`` and ``out/faults.json`` rewritten after each; ``said`` told each."""
    out.mkdir(parents=True, exist_ok=True)
    header = {"command": command, "server": server, **_machine(root)}
    results: list[CaseResult] = []
    for case in cases:
        results.append(run_case(case, out, environment, root))
        said(results[-1])
        (out / "faults.json").write_text(write_json(results, header), encoding="utf-8")
        (out / "faults.md").write_text(document(results, header), encoding="utf-8")
    return results


def document(results: Sequence[CaseResult], header: Mapping[str, Any]) -> str:
    """faults.md: the command, the machine, the table, and each case's commands and events."""
    lines = [
        f"# Fault matrix: {header.get('server', LAB)}\n\n",
        f"`{header['command']}` at commit {header['commit']}, {header['started']}, {header['cores']} cores, ",
        f"load {header['load_1m_at_start']} at the start. Recovered after: from the fault until each device ",
        "it hit (a failed row) started an ok turn again ('-': one never did). Lost: planned turns with no row. ",
        "Analyze = bench.csv: the rows the device's traces recompute (`pipeline.analyze`) against its bench.csv, ",
        "cell for cell.\n\n",
        table(results),
        "\n",
    ]
    for r in results:
        lines.append(f"\n## {r.name}: {r.title}\n\n")
        lines.append(f"status: {r.status}; device exit {r.device_exit}, {r.device_s} s; load {r.load}\n\n")
        lines += [f"    {c}\n" for c in r.commands]
        lines += ["\n"] + [f"- {e}\n" for e in r.events]
    return "".join(lines)
