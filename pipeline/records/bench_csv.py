"""bench.csv: the turn record's one writer and one reader: the raw per-turn rows (METHOD M10), appended as
each turn finishes, and read back.

Its header and each cell's type come from the one declaration of the columns, ``turn.TurnRow`` (beside it:
the two would pass the house's 400 lines as one module).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from pathlib import Path

from msgspec.structs import astuple

from pipeline.records.schema import Cell, Column
from pipeline.records.turn_row import COLUMNS, SCHEMA, TurnRow
from pipeline.records.whole_lines import append_whole


class BenchCsvError(ValueError):
    """A bench.csv this version cannot read or append to: another header, a bad cell (with where)."""


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

    def append(self, rows: Iterable[TurnRow]) -> None:
        self.append_lines(csv_line(row) for row in rows)

    def append_lines(self, lines: Iterable[str]) -> None:
        """Rows already made lines by ``csv_line``: all of them or none (``RecordWriteError``)."""
        text = "".join(lines)
        if text:
            append_whole(self.path, text.encode("utf-8"))


class _Text:
    """A file for csv.writer that hands back what is written: ``writerow`` returns ``write``'s result."""

    @staticmethod
    def write(text: str) -> str:
        return text


_LINE_WRITER = csv.writer(_Text())


def csv_line(row: TurnRow) -> str:
    """One row as bench.csv writes it (quoted as needed, CRLF-ended as the csv module writes)."""
    return csv_line_of(astuple(row))  # the struct's fields are the columns, in order


def csv_line_of(values: Iterable[object]) -> str:
    """A line of these cells, in order (``csv_line`` of a row gives it the row's values, in COLUMNS order)."""
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


def read_bench_csv(path: Path) -> list[TurnRow]:
    """The rows of a bench.csv, each cell parsed as its column's type (an empty cell: None)."""
    with path.open(encoding="utf-8", newline="") as fh:
        lines = csv.reader(fh)
        header = tuple(next(lines, ()))
        if header != COLUMNS:
            raise BenchCsvError(f"{path}: its columns are not the ones this version writes")
        return [_row(path, number, cells) for number, cells in enumerate(lines, start=2)]


def _row(path: Path, number: int, cells: list[str]) -> TurnRow:
    if len(cells) != len(COLUMNS):
        raise BenchCsvError(f"{path}:{number}: {len(cells)} cells, not {len(COLUMNS)}")
    try:
        return _new_row(*[parse(cell) for parse, cell in zip(_PARSERS, cells, strict=True)])
    except ValueError as exc:
        raise BenchCsvError(f"{path}:{number}: {exc}") from None


def _parser(column: Column) -> Callable[[str], Cell]:
    kind = column.kind
    if kind is str:
        return _text
    if column.optional:
        return lambda cell: kind(cell) if cell else None
    return lambda cell: kind(cell)


_PARSERS = tuple(_parser(c) for c in SCHEMA)
_new_row: Callable[..., TurnRow] = TurnRow  # each cell parsed as its column's type, in order
