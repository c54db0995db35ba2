"""The row sink a run writes through: each finished turn's trace line -> rows -> bench.csv.

The run hands over the trace line it just wrote, never a number of its own; the rows
are decoded from that line and made by the same facts as from a trace file read later
(``read``), so bench.csv and ``python -m pipeline.analyze`` of the trace file agree by
construction. The progress line it says for each turn goes to the operator's terminal: a question id
or an error is a device's string on a server, so no control character in it reaches the terminal raw.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.analysis.read import facts_from_spans
from pipeline.analysis.traces import spans_from_traces_data
from pipeline.records.bench_csv import BenchCsv
from pipeline.records.turn_row import TurnRow


class RowSink:
    """Appends each turn's rows to bench.csv as it finishes, counts them, keeps them (unless ``keep`` is
    False: a server up for days would hold every row it ever wrote), and says how it went."""

    def __init__(self, bench: BenchCsv, total: int, progress: Callable[[str], None], keep: bool = True) -> None:
        self.bench = bench
        self.total = total
        self.progress = progress
        self.keep = keep
        self.rows: list[TurnRow] = []
        self.count = 0  # rows written, kept or not

    def __call__(self, line: dict[str, Any]) -> None:
        facts = facts_from_spans(spans_from_traces_data(line))
        self.bench.append_lines(f.csv_line for f in facts if f.csv_line is not None)
        rows = [f.row for f in facts]
        if self.keep:
            self.rows.extend(rows)
        self.count += len(rows)
        self.progress(progress_line(self.count, self.total, rows))


def progress_line(done: int, total: int, rows: list[TurnRow]) -> str:
    parts = []
    for row in rows:
        tag = " (warm-up)" if row.warmup else ""
        if row.ok:
            parts.append(
                f"round {row.round}{tag} {row.question_id}: ok, {_said('whole turn', row.whole_turn_ms)}, "
                f"{_said('first audio', row.first_audio_ms)}, {row.llm_calls} LLM call(s), "
                f"{row.sentences} sentence(s)"
            )
        else:
            parts.append(f"round {row.round}{tag} {row.question_id}: FAILED ({row.error})")
    count = f"[{done}/{total}]" if total else f"[{done}]"  # a server does not know how many turns will come
    return printable(f"{count} " + "; ".join(parts))


# C0, DEL and C1 (ESC starts a terminal's escape sequences, CSI is one character in C1), and the marks that
# reorder what a terminal shows (bidirectional overrides and isolates), each written as Python escapes it
_UNPRINTABLE = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in [*range(0x20), *range(0x7F, 0xA0), 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
}


def printable(text: str) -> str:
    """``text`` with every control character escaped (``\\x1b``): what a terminal shows, never what it obeys."""
    return text.translate(_UNPRINTABLE)


def _said(name: str, ms: float | None) -> str:
    # a server's trace of a device turn has no playback: the device measures it, in its own trace
    return f"{name} {ms} ms" if ms is not None else f"{name}: measured on the device"
