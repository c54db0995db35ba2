"""How a typed record declares its columns once: each field's type, unit, meaning and group; and a CSV of
records read back through that declaration.

A record the lab writes as CSV (``turn.TurnRow``: bench.csv; ``segment.SegmentRow``: segments.csv;
``path.PathRow``: paths.csv; ``capacity.StepRow``: steps.csv; ``acoustic.AcousticRow``: the acoustic
rows) is a msgspec Struct (or a dataclass) whose fields are ``Annotated[type, meta(unit, meaning, group)]``,
in the file's column order. ``schema`` reads those annotations back as ``Column``s, from which the file's
header, its numeric columns and the docs' table of it (``table``) are generated, so none of them is ever
written by hand; ``read_csv`` reads such a file back, each cell as its column's type.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast, get_args, get_origin, get_type_hints

import msgspec
from msgspec import Meta

Cell = str | int | float | None
R = TypeVar("R")

# units, as the tables print them
MS, NS, COUNT, TOKENS, FLAG, SHARE, CORES, CELSIUS, TEXT = (
    "ms",
    "ns",
    "count",
    "tokens",
    "0/1",
    "0-1",
    "cores",
    "°C",
    "",
)
SECONDS, MB, CORE_PCT = "s", "MB", "% of one core"


def meta(unit: str, meaning: str, group: str = "", repeated: bool = False) -> Meta:
    """A field's annotation: its unit and meaning; ``group``: the columns it belongs with; ``repeated``: a
    text many records share (a run's, a question's, a model's), kept once by a reader (``facts.facts_of``)."""
    extra: dict[str, Any] = {"unit": unit}
    if group:
        extra["group"] = group
    if repeated:
        extra["repeated"] = True
    return Meta(description=meaning, extra=extra)


class Column(msgspec.Struct, frozen=True):
    """One field of a record, as its annotation declares it."""

    name: str
    kind: type  # str, int, float or bool
    optional: bool  # may be empty (None)
    unit: str
    meaning: str
    group: str
    repeated: bool


def _fields(record: type) -> tuple[str, ...]:
    if issubclass(record, msgspec.Struct):
        return record.__struct_fields__
    return tuple(f.name for f in dataclasses.fields(cast(Any, record)))


def schema(record: type) -> tuple[Column, ...]:
    """The record's fields as columns, in its order (a CSV's): a msgspec Struct's or a dataclass's. A field
    declared without ``meta`` is no column (a reader's note of where a record was read, say)."""
    hints = get_type_hints(record, include_extras=True)
    out = []
    for name in _fields(record):
        if get_origin(hints[name]) is not Annotated:
            continue
        annotated, declared = get_args(hints[name])
        members = get_args(annotated) or (annotated,)
        kinds = [k for k in members if k is not type(None)]
        extra: dict[str, Any] = declared.extra or {}
        out.append(
            Column(
                name,
                kinds[0],
                len(kinds) < len(members),
                extra["unit"],
                declared.description or "",
                extra.get("group", ""),
                bool(extra.get("repeated", False)),
            )
        )
    return tuple(out)


_KINDS = {str: "text", int: "integer", float: "number", bool: "`True` or `False`"}


def _type(c: Column) -> str:
    kind = _KINDS[c.kind]
    return f"{kind} or empty" if c.optional else kind


def table(columns: tuple[Column, ...]) -> str:
    """A Markdown table of the columns: each one's name, type, unit and meaning, in the record's order."""
    lines = ["| column | type | unit | meaning |", "|---|---|---|---|"]
    lines += [f"| `{c.name}` | {_type(c)} | {c.unit} | {c.meaning} |" for c in columns]
    return "\n".join(lines) + "\n"


class RecordFileError(ValueError):
    """A record's CSV this version cannot read: another header, a bad cell (with where)."""


def _flag(cell: str) -> bool:
    if cell not in ("True", "False"):
        raise ValueError(f"{cell!r} is neither True nor False")
    return cell == "True"


def parser(column: Column) -> Callable[[str], Cell]:
    """A cell's text back as its column's type: the text the csv module writes of a value (``str``), an empty
    cell None where the column may be empty."""
    kind: Callable[[str], Cell] = _flag if column.kind is bool else column.kind
    if column.kind is str:
        return str
    if column.optional:
        return lambda cell: kind(cell) if cell else None
    return kind


def read_csv(
    path: Path, record: Callable[..., R], columns: Sequence[Column], before: Sequence[str] = ()
) -> list[tuple[list[str], R]]:
    """Each line of a CSV whose header is ``before`` then ``columns``: its first ``len(before)`` cells as text,
    and the record made of the rest, each parsed as its column's type. Another header, a short line or a bad
    cell: ``RecordFileError`` naming the file and the line."""
    header = (*before, *(c.name for c in columns))
    parsers = [parser(c) for c in columns]
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            lines = csv.reader(fh)
            if tuple(next(lines, ())) != header:
                raise RecordFileError(f"{path}: its columns are not the ones this version writes")
            out = []
            for number, cells in enumerate(lines, start=2):
                if len(cells) != len(header):
                    raise RecordFileError(f"{path}:{number}: {len(cells)} cells, not {len(header)}")
                lead, rest = cells[: len(before)], cells[len(before) :]
                try:
                    out.append((lead, record(*[parse(cell) for parse, cell in zip(parsers, rest, strict=True)])))
                except ValueError as exc:
                    raise RecordFileError(f"{path}:{number}: {exc}") from None
            return out
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise RecordFileError(f"{path}: cannot be read ({exc})") from None
