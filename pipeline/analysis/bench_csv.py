"""bench.csv: the raw per-turn rows (METHOD M10), appended as each turn finishes."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

from pipeline.analysis.numbers import Row
from pipeline.analysis.rows import COLUMNS


class BenchCsvError(ValueError):
    pass


# A text cell starting with one of these is read as a formula by spreadsheets (CSV injection):
# it is written with a leading apostrophe, which read_bench_csv takes off again.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".")
    text = str(value)
    return "'" + text if isinstance(value, str) and text.startswith(FORMULA_START) else text


def _text(value: str) -> str:
    return value[1:] if value.startswith("'") and value[1:].startswith(FORMULA_START) else value


class BenchCsv:
    """Appends rows to a CSV file; refuses a file whose header is not ours."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.exists() and path.stat().st_size > 0:
            with path.open(encoding="utf-8", newline="") as fh:
                header = next(csv.reader(fh), [])
            if tuple(header) != COLUMNS:
                raise BenchCsvError(
                    f"{path}: existing file has other columns than this version writes; "
                    "choose another output folder or move the file away"
                )
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w", encoding="utf-8", newline="") as fh:
                csv.writer(fh).writerow(COLUMNS)

    def append(self, rows: Iterable[Row]) -> None:
        self.append_lines(csv_line(row) for row in rows)

    def append_lines(self, lines: Iterable[str]) -> None:
        """Rows already made lines by ``csv_line``."""
        with self.path.open("a", encoding="utf-8", newline="") as fh:
            fh.writelines(lines)
            fh.flush()


class _Text:
    """A file for csv.writer that hands back what is written: ``writerow`` returns ``write``'s result."""

    @staticmethod
    def write(text: str) -> str:
        return text


_LINE_WRITER = csv.writer(_Text())


def csv_line(row: Row) -> str:
    """One row as bench.csv writes it (quoted as needed, CRLF-ended as the csv module writes)."""
    return csv_line_of(row.get(c) for c in COLUMNS)


def csv_line_of(values: Iterable[object]) -> str:
    """``csv_line`` of a row's values, in COLUMNS order."""
    # _cell's cases, commonest first, in one expression: a fleet's report writes millions of cells.
    cells = [
        ""
        if value is None
        else str(value)
        if type(value) is int
        else f"{value:.3f}".rstrip("0").rstrip(".")
        if type(value) is float
        else ("'" + value if value.startswith(FORMULA_START) else value)
        if type(value) is str
        else _cell(value)
        for value in values
    ]
    line = ",".join(cells)
    # The writer quotes a cell holding a comma, a quote or a line end (or a row of one empty cell), and
    # doubles the quotes in it. Where no cell holds a quote or a line end, its line is the cells joined, in
    # quotes where they hold a comma: found here by a few scans of the line, not the writer's test of
    # each character.
    if not line or '"' in line or "\r" in line or "\n" in line:
        written: str = _LINE_WRITER.writerow(cells)
        return written
    if line.count(",") != len(cells) - 1:
        line = ",".join(['"' + cell + '"' if "," in cell else cell for cell in cells])
    return line + "\r\n"


def bench_run_ids(path: Path) -> set[str]:
    """The run ids a bench.csv already holds (none when it does not exist)."""
    if not path.is_file():
        return set()
    with path.open(encoding="utf-8", newline="") as fh:
        return {row.get("run_id") or "" for row in csv.DictReader(fh)}


def read_bench_csv(path: Path) -> list[Row]:
    """Rows as strings, numbers parsed where they look like numbers."""
    out: list[Row] = []
    with path.open(encoding="utf-8", newline="") as fh:
        for raw in csv.DictReader(fh):
            row: Row = {}
            for key, value in raw.items():
                row[key] = _parse(value) if key in NUMERIC else _text(value or "")
            out.append(row)
    return out


NUMERIC = frozenset(
    c
    for c in COLUMNS
    if (c.endswith("_ms") and c != "llm_first_token_ms_per_call")
    or c
    in (
        "round",
        "warmup",
        "tokens",
        "ok",
        "temp_c",
        "llm_calls",
        "sentences",
        "turn_start_ns",
        "prompt_tokens",
        "prompt_cached_tokens",
        "load_avg_1m",
        "other_cpu_share",
        "asr_error_rate",
        "answer_quality",
        "packets_lost",
        "packets_late",
        "device",
        "devices",
    )
)


def _parse(value: str | None) -> int | float | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        return float(value)
