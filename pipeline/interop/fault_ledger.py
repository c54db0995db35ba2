"""After a fault, what the device's rows say, checked against what it was asked to do (issue 42, "nothing lost").

A run plans ``devices x rounds x questions`` turns. Each planned turn is a key ``(device, round, question)``
(``device`` None for a one-device run, as its rows have it); after the fault every key must be in exactly one
row, ok or failed. The ledger says which keys have no row (lost), which have more than one (duplicates),
which rows name no planned key, how the rows split into ok and failed by error, how long the device took to
be answered again after the fault, and whether the traces recompute the rows bench.csv holds (the
``pipeline.analyze`` cross-check, here exact: the same rows, cell for cell). Pure functions over rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from pipeline.records.turn_row import TurnRow

Key = tuple[int | None, int, str]  # (device, round, question id)
ERROR_CHARS = 80  # an error's text in the table: enough to name the fault, not a paragraph


def planned(question_ids: Sequence[str], rounds: int, devices: int) -> list[Key]:
    """Every turn a run of these questions, rounds and devices asks: device None when there is one device."""
    indices: list[int | None] = [None] if devices == 1 else list(range(devices))
    return [(d, r, q) for d in indices for r in range(1, rounds + 1) for q in question_ids]


def key_of(row: TurnRow) -> Key:
    return row.device, row.round, row.question_id


def error_kind(row: TurnRow) -> str:
    """A failed row's error as the table shows it: its first line, cut to ``ERROR_CHARS``, and the server's
    cause beside it where the server's traces were read with the device's (``server_error``)."""
    said = _first_line(row.error) or "no error text"
    cause = _first_line(row.server_error)
    return said if not cause or cause == said else f"{said} (server: {cause})"


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    line = lines[0] if lines else ""
    return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1] + "…"


@dataclass(frozen=True, slots=True)
class Ledger:
    """What the rows of one fault case say, against the turns it planned."""

    planned: int
    rows: int
    ok: int
    failed: dict[str, int]  # error kind -> rows
    lost: list[Key]  # planned, no row
    duplicates: list[Key]  # more than one row
    unplanned: list[Key]  # a row for no planned turn
    recovery_s: float | None  # the fault until each device it hit started an ok turn again; None: one never did
    slowest_ok_s: float | None = None  # the longest whole turn among the ok rows
    packets_lost: int = 0  # the device's downlink, over every row (UDP: a datagram that never came)
    packets_late: int = 0  # came after a newer one (reordered): not played
    ok_after_fault: int = 0
    failed_after_fault: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def whole(self) -> bool:
        """Every planned turn in exactly one row, and no other row."""
        return not self.lost and not self.duplicates and not self.unplanned


def recovery_s(rows: Sequence[TurnRow], fault_ns: int | None) -> float | None:
    """Seconds from the fault until every device it hit was answered again: for each device with a failed row,
    the start of its first ok turn that started at or after the fault; the latest of these (where no device
    failed, every device counts). None: no fault moment, or a device it hit never had such a turn."""
    if fault_ns is None:
        return None
    hit = {r.device for r in rows if not r.ok} or {r.device for r in rows}
    firsts = []
    for device in hit:
        starts = [r.turn_start_ns for r in rows if r.device == device and r.ok and r.turn_start_ns >= fault_ns]
        if not starts:
            return None
        firsts.append(min(starts))
    return (max(firsts) - fault_ns) / 1e9 if firsts else None


def ledger(plan: Sequence[Key], rows: Sequence[TurnRow], fault_ns: int | None) -> Ledger:
    """The ledger of ``rows`` against ``plan``; ``fault_ns``: when the fault began (epoch ns, the rows' clock)."""
    counts = Counter(key_of(r) for r in rows)
    wanted = set(plan)
    after = [r for r in rows if fault_ns is not None and r.turn_start_ns >= fault_ns]
    return Ledger(
        planned=len(plan),
        rows=len(rows),
        ok=sum(1 for r in rows if r.ok),
        failed=dict(Counter(error_kind(r) for r in rows if not r.ok).most_common()),
        lost=[k for k in plan if k not in counts],
        duplicates=sorted((k for k, n in counts.items() if n > 1), key=_order),
        unplanned=sorted((k for k in counts if k not in wanted), key=_order),
        recovery_s=recovery_s(rows, fault_ns),
        slowest_ok_s=max((r.whole_turn_ms / 1000 for r in rows if r.ok and r.whole_turn_ms is not None), default=None),
        packets_lost=sum(r.packets_lost or 0 for r in rows),
        packets_late=sum(r.packets_late or 0 for r in rows),
        ok_after_fault=sum(1 for r in after if r.ok),
        failed_after_fault=sum(1 for r in after if not r.ok),
    )


def _order(key: Key) -> tuple[int, int, str]:
    device, round_no, question = key
    return (-1 if device is None else device), round_no, question


def traces_agree(bench: Sequence[TurnRow], traced: Sequence[TurnRow]) -> str:
    """ "" when the rows recomputed from the traces are bench.csv's rows, cell for cell, in turn-start order;
    otherwise what differs, in a line."""
    ours = sorted(bench, key=_start)
    theirs = sorted(traced, key=_start)
    if ours == theirs:
        return ""
    only_csv = {_identity(r) for r in ours} - {_identity(r) for r in theirs}
    only_traces = {_identity(r) for r in theirs} - {_identity(r) for r in ours}
    if only_csv or only_traces:
        return f"{len(only_csv)} row(s) only in bench.csv, {len(only_traces)} only in the traces"
    differing = [a.question_id for a, b in zip(ours, theirs, strict=False) if a != b]
    return f"the same turns, {len(differing)} row(s) with other cells (first: {differing[0]})"


def _start(row: TurnRow) -> tuple[int, str]:
    return row.turn_start_ns, row.trace_id


def _identity(row: TurnRow) -> tuple[str, str, int, int | None, int]:
    return row.run_id, row.question_id, row.round, row.device, row.turn_start_ns
