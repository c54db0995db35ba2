"""Two fault matrices side by side, a line per case: the lab's server and the real xiaozhi-esp32-server.

Each side is a ``faults.json`` as ``scripts/fault_matrix.py`` wrote it (``--out``); a case one side did not
run (or could not have) says so in its cells. Every cell is the side's own, as its matrix measured it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.interop.fault_result import CaseResult, read_json, recovered_cell, rows_cell
from pipeline.report import markdown
from pipeline.report.document import Table

HEADERS = ("rows: ok / failed (error)", "recovered after", "lost, doubled")


def _side(result: CaseResult | None) -> list[str]:
    if result is None:
        return ["not in this matrix", "-", "-"]
    ledger = result.ledger
    if ledger is None:
        return [result.status, "-", "-"]
    kept = f"{len(ledger.lost)}, {len(ledger.duplicates)}" + (
        f"; {len(ledger.unplanned)} unplanned" if ledger.unplanned else ""
    )
    return [rows_cell(ledger), recovered_cell(ledger), kept]


def side_by_side(files: Sequence[Path]) -> str:
    """The markdown table of the matrices in ``files`` (faults.json each, named by the server it measured),
    then where each was run."""
    read = [read_json(path) for path in files]
    names = [str(header.get("server") or path.parent.name) for (header, _r), path in zip(read, files, strict=True)]
    cases: dict[str, str] = {}
    for _header, results in read:
        for r in results:
            cases.setdefault(r.name, r.title)
    head = ("case", *(f"{name}: {h}" for name in names for h in HEADERS))
    rows = []
    for case, title in cases.items():
        cells = [f"{case}: {title}"]
        for _header, results in read:
            cells += _side(next((r for r in results if r.name == case), None))
        rows.append(tuple(cells))
    lines = [markdown.table(Table("faults-side-by-side", head, tuple(rows))), ""]
    for name, (header, _results) in zip(names, read, strict=True):
        command, commit = header.get("command", "?"), header.get("commit", "?")
        started, load = header.get("started", "?"), header.get("load_1m_at_start", "?")
        lines.append(f"- {name}: `{command}` at {commit}, {started}, load {load} at the start")
    return "\n".join(lines) + "\n"
