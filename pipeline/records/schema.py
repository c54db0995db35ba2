"""How a typed record declares its columns once: each field's type, unit, meaning and group.

A record the lab writes as CSV (``columns.TurnRow``: bench.csv; ``server_segments.SegmentRow``:
segments.csv; ``path.paths_csv.PathRow``: paths.csv) is a msgspec Struct whose fields are
``Annotated[type, meta(unit, meaning, group)]``, in the file's column order. ``schema`` reads
those annotations back as ``Column``s, from which the file's header, its numeric columns and the
README's table of it (``table``) are generated, so none of them is ever written by hand.
"""

from __future__ import annotations

from typing import Any, get_args, get_type_hints

import msgspec
from msgspec import Meta

Cell = str | int | float | None

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


def schema(record: type[msgspec.Struct]) -> tuple[Column, ...]:
    """The record's fields as columns, in its order (a CSV's)."""
    hints = get_type_hints(record, include_extras=True)
    out = []
    for name in record.__struct_fields__:
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
