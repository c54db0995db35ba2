"""One fault case's result, as JSON (``faults.json``) and as a line of the matrix's table (``faults.md``).

A case that could not be run is a row that says so and why (``status``), never a row of made-up figures.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.interop.fault_ledger import Key, Ledger


@dataclass(slots=True)
class CaseResult:
    """What one case did and what its checks found."""

    name: str
    title: str
    status: str = "run"  # "run", or "not run: why", or "failed: why" (the harness could not finish it)
    commands: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # what the harness did, seconds from the device's start
    device_saw: list[str] = field(default_factory=list)  # the device's error lines, each with its count
    fault_ns: int | None = None  # when the fault began (Unix ns, the rows' clock)
    device_exit: int | None = None
    device_s: float | None = None
    ledger: Ledger | None = None
    analyze: str = ""  # "same N rows", or what differs between bench.csv and the traces
    server_records: list[str] = field(default_factory=list)  # each server folder: its bench.csv against its traces
    left_behind: list[str] = field(default_factory=list)
    load: list[float] = field(default_factory=list)  # the 1-minute load average before and after

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        ledger = data.get("ledger")
        if ledger is not None:
            keys = ("lost", "duplicates", "unplanned")
            ledger = Ledger(**{**ledger, **{k: [_key(x) for x in ledger[k]] for k in keys}})
        return cls(**{**data, "ledger": ledger})


def _key(value: Sequence[Any]) -> Key:
    device, round_no, question = value
    return device, int(round_no), str(question)


def write_json(results: Sequence[CaseResult], header: dict[str, Any]) -> str:
    return json.dumps({**header, "cases": [r.as_dict() for r in results]}, indent=2, ensure_ascii=False) + "\n"


HEAD = (
    "| case | what the device saw | rows: ok / failed (error) | recovered after | lost | duplicates "
    "| analyze = bench.csv | server records | left behind |\n"
    "|---|---|---|---|---|---|---|---|---|\n"
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _rows(ledger: Ledger) -> str:
    failed = "; ".join(f"{n} {error}" for error, n in ledger.failed.items())
    slowest = "" if ledger.slowest_ok_s is None else f"; slowest ok turn {ledger.slowest_ok_s:.1f} s"
    if ledger.packets_lost or ledger.packets_late:
        slowest += f"; downlink packets {ledger.packets_lost} lost, {ledger.packets_late} late (not played)"
    return f"{ledger.ok} ok / {ledger.rows - ledger.ok} failed" + (f" ({failed})" if failed else "") + slowest


def _keys(keys: Sequence[Key]) -> str:
    if not keys:
        return "0"
    shown = ", ".join(f"{q} r{r}" + ("" if d is None else f" d{d}") for d, r, q in keys[:4])
    return f"{len(keys)}: {shown}" + (" ..." if len(keys) > 4 else "")


def read_json(path: Path) -> tuple[dict[str, Any], list[CaseResult]]:
    """A faults.json: its header (the command, the machine) and its cases."""
    data = json.loads(path.read_text(encoding="utf-8"))
    cases = data.pop("cases")
    return data, [CaseResult.from_dict(c) for c in cases]


def rows_cell(ledger: Ledger) -> str:
    """The device's rows against the plan: "3 ok / 1 failed of 4 planned (1 disconnected)"."""
    return _rows(ledger).replace(" failed", f" failed of {ledger.planned} planned", 1)


def recovered_cell(ledger: Ledger) -> str:
    """The time until every device the fault hit was answered again."""
    if ledger.ok == ledger.rows and not ledger.lost:
        return "none needed (no turn failed)"
    return "-" if ledger.recovery_s is None else f"{ledger.recovery_s:.1f} s"


def table_line(result: CaseResult) -> str:
    """The case's line of the matrix."""
    name = f"{result.name}: {result.title}"
    ledger = result.ledger
    if ledger is None:
        return f"| {_cell(name)} | {_cell(result.status)} | - | - | - | - | - | - | - |\n"
    cells = [
        name if result.status == "run" else f"{name} ({result.status})",
        "; ".join(result.device_saw) or "no error line",
        rows_cell(ledger),
        recovered_cell(ledger),
        _keys(ledger.lost),
        _keys(ledger.duplicates) + (f"; {len(ledger.unplanned)} unplanned" if ledger.unplanned else ""),
        result.analyze,
        "; ".join(result.server_records) or "-",
        "; ".join(result.left_behind) or "nothing",
    ]
    return "| " + " | ".join(_cell(c) for c in cells) + " |\n"


def table(results: Sequence[CaseResult]) -> str:
    return HEAD + "".join(table_line(r) for r in results)
