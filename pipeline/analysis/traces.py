"""Reads OTLP JSON trace files (Collector file format) into plain records of what was read: ``ReadSpan``.

(A span as the lab builds it before writing it is another record, ``tracing.records.SpanRecord``:
ids as integers, a parent, a kind. What is read back holds the file's hex ids and its attributes
as decoded, and only what the analysis uses.)

Works on any such file: ours, a Jaeger ``/api/v3`` export, a Collector's file
exporter. Lines that cannot be read are reported, not fatal.

A line is decoded twice over only when it needs to be: first straight from the file's
bytes into typed structs (``msgspec``: no dicts for the OTLP wrapping, most of the cost of
a fleet's million spans), and, if anything in it is unusual (invalid UTF-8, a number out
of range, a field of an unexpected type, ``NaN``), again by the plain decoding
(``json`` into dicts, ``spans_from_traces_data``), which decides whether the line is
readable and says why not. Both give the same spans for any line the fast one accepts,
so a file reads the same either way, only faster.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET, UnsetType

AttrValue = str | bool | int | float | list[Any] | None


def attr_number(value: AttrValue) -> float | None:
    """An attribute's number as a float; None where it is not one (a flag is not a number)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# Structs, not dataclasses: built in C, about ten times cheaper than a frozen dataclass's
# __init__, which matters at a million spans; gc=False as they hold no cycles.
class ReadEvent(msgspec.Struct, frozen=True, gc=False):
    """A span event as read from a trace file."""

    name: str
    time_ns: int
    attributes: dict[str, AttrValue] = msgspec.field(default_factory=dict)


class ReadSpan(msgspec.Struct, frozen=True, gc=False):
    """A span as read from a trace file: hex ids, times in ns since the epoch, decoded attributes."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AttrValue]
    events: tuple[ReadEvent, ...]
    status_code: int = 0

    def event_ns(self, name: str) -> int | None:
        """The time of the span's first event of that name (None: it has none)."""
        for e in self.events:
            if e.name == name:
                return e.time_ns
        return None


@dataclass(slots=True)
class ReadProblems:
    """What could not be read, with where it was."""

    messages: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        self.messages.append(message)


# What the plain decoding gives up on: a line with any of these is reported, not fatal.
_UNREADABLE = (ValueError, KeyError, TypeError, AttributeError, OverflowError)


def _finite(number: float) -> float:
    if not math.isfinite(number):
        raise ValueError(f"non-finite number {number!r} in a trace")
    return number


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not a number a trace may hold")


def decode_any_value(value: dict[str, Any]) -> AttrValue:
    """Decode an OTLP JSON ``AnyValue``; a non-finite number makes the line unreadable."""
    if "stringValue" in value:
        return str(value["stringValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return _finite(float(value["doubleValue"]))
    if "arrayValue" in value:
        return [decode_any_value(v) for v in value["arrayValue"].get("values", [])]
    return None


def _attributes(items: Iterable[dict[str, Any]]) -> dict[str, AttrValue]:
    return {item["key"]: decode_any_value(item.get("value", {})) for item in items}


def spans_from_traces_data(data: dict[str, Any]) -> list[ReadSpan]:
    """All spans of one ``TracesData`` object (one line of a trace file)."""
    out = []
    for resource_spans in data.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                out.append(
                    ReadSpan(
                        trace_id=span["traceId"],
                        span_id=span["spanId"],
                        parent_span_id=span.get("parentSpanId", ""),
                        name=span["name"],
                        start_ns=int(span["startTimeUnixNano"]),
                        end_ns=int(span["endTimeUnixNano"]),
                        attributes=_attributes(span.get("attributes", [])),
                        events=tuple(
                            ReadEvent(
                                name=e["name"],
                                time_ns=int(e["timeUnixNano"]),
                                attributes=_attributes(e.get("attributes", [])),
                            )
                            for e in span.get("events", [])
                        ),
                        status_code=int(span.get("status", {}).get("code", 0)),
                    )
                )
    return out


# The OTLP JSON shape as the fast decoding sees it, typed as our exporter writes it (64-bit
# integers as strings or numbers, the rest as JSON types): msgspec checks those types in C, so
# the conversion below is a choice, not a conversion. Anything else (a null, a number where text
# belongs, an int written as a float) fails the decoding, and the plain decoding decides. A field
# left out is UNSET, so an explicit null never passes for a missing field. Fields the plain
# decoding leaves out (resources, scopes, kind, flags, links) are skipped unread.
class _AnyValue(msgspec.Struct, rename="camel", frozen=True, gc=False):
    string_value: str | UnsetType = UNSET
    bool_value: bool | UnsetType = UNSET
    int_value: int | str | UnsetType = UNSET
    double_value: float | UnsetType = UNSET
    array_value: _ArrayValue | UnsetType = UNSET


class _ArrayValue(msgspec.Struct, frozen=True, gc=False):
    values: list[_AnyValue] = []


_NO_VALUE = _AnyValue()


class _KeyValue(msgspec.Struct, frozen=True, gc=False):
    key: str
    value: _AnyValue = _NO_VALUE  # none given: no value, as decode_any_value({})


_Integer = int | str  # OTLP JSON writes 64-bit integers as strings; int() takes either, as the plain decoding does


class _Event(msgspec.Struct, rename="camel", frozen=True, gc=False):
    time_unix_nano: _Integer
    name: str
    attributes: list[_KeyValue] = []


class _Status(msgspec.Struct, frozen=True, gc=False):
    code: _Integer = 0


class _Span(msgspec.Struct, rename="camel", frozen=True, gc=False):
    trace_id: str
    span_id: str
    name: str
    start_time_unix_nano: _Integer
    end_time_unix_nano: _Integer
    parent_span_id: str = ""
    attributes: list[_KeyValue] = []
    events: list[_Event] = []
    status: _Status | UnsetType = UNSET


class _ScopeSpans(msgspec.Struct, frozen=True, gc=False):
    spans: list[_Span] = []


class _ResourceSpans(msgspec.Struct, rename="camel", frozen=True, gc=False):
    scope_spans: list[_ScopeSpans] = []


class _TracesData(msgspec.Struct, rename="camel", frozen=True, gc=False):
    resource_spans: list[_ResourceSpans] = []


_DECODER = msgspec.json.Decoder(_TracesData)


def _value(v: _AnyValue) -> AttrValue:
    """``decode_any_value`` for the fast decoding's struct: the same order, the same conversions."""
    if v.string_value is not UNSET:
        return v.string_value
    if v.bool_value is not UNSET:
        return v.bool_value
    if v.int_value is not UNSET:
        return int(v.int_value)
    if v.double_value is not UNSET:
        return _finite(v.double_value)
    if v.array_value is not UNSET:
        return [_value(x) for x in v.array_value.values]
    return None


def _struct_attributes(items: list[_KeyValue]) -> dict[str, AttrValue]:
    out: dict[str, AttrValue] = {}
    for kv in items:
        v = kv.value
        # _value's first four cases inline, in its order: a call per attribute would be a third of the reading
        x: Any = v.string_value
        if x is UNSET:
            x = v.bool_value
            if x is UNSET:
                x = v.int_value
                if x is UNSET:
                    x = v.double_value
                    if x is UNSET or not math.isfinite(x):  # _value says why a non-finite number cannot be read
                        x = _value(v)
                else:
                    x = int(x)
        out[kv.key] = x
    return out


def _span(s: _Span) -> ReadSpan:
    return ReadSpan(
        s.trace_id,
        s.span_id,
        s.parent_span_id,
        s.name,
        int(s.start_time_unix_nano),
        int(s.end_time_unix_nano),
        _struct_attributes(s.attributes) if s.attributes else {},
        tuple(
            [
                ReadEvent(e.name, int(e.time_unix_nano), _struct_attributes(e.attributes) if e.attributes else {})
                for e in s.events
            ]
        )
        if s.events
        else (),
        0 if s.status is UNSET else int(s.status.code),
    )


def _fast_spans(line: bytes) -> list[ReadSpan] | None:
    """The line's spans, or None where the plain decoding has to decide."""
    try:
        data = _DECODER.decode(line)
        return [_span(s) for rs in data.resource_spans for ss in rs.scope_spans for s in ss.spans]
    except (*_UNREADABLE, RecursionError):  # msgspec's errors are ValueErrors
        return None


def _plain_spans(line: bytes) -> list[ReadSpan]:
    """The line as a text-mode read gives it (invalid UTF-8 replaced, its line end one ``\\n``), decoded plainly."""
    text = line.decode("utf-8", errors="replace")
    if text.endswith(("\r", "\n")):
        text = text.rstrip("\r\n") + "\n"  # one terminator at most: splitlines(keepends=True) cut there
    if not text.strip():
        return []
    return spans_from_traces_data(json.loads(text, parse_constant=_no_constants))


# Several lines' worth: with the default 8 KiB, every line of ours (about 9 KiB a turn) takes two reads.
_BUFFER = 1 << 20


def _lines(raw: bytes) -> Iterable[bytes]:
    # A file read in binary splits at "\n" only; text mode also ends a line at a lone "\r".
    return raw.splitlines(keepends=True) if b"\r" in raw else (raw,)


class TraceLine(NamedTuple):
    """One line of a trace file as read: where it starts, and its spans or why it has none."""

    number: int  # counted from the first line read (1 for a whole file)
    offset: int  # byte offset of the physical line it is in (a lone CR may cut one into several)
    part: int  # which of that physical line's lines it is
    after: int  # byte offset just after that physical line
    spans: list[ReadSpan]
    unreadable: str  # why the line could not be read ("" when it could)


def unreadable_message(path: Path | str, number: int, why: str) -> str:
    return f"{path}:{number}: unreadable trace line ({why})"


def read_lines(path: Path, start: int = 0, end: int | None = None) -> Iterator[TraceLine]:
    """Every line of ``path`` from byte ``start`` (a line's first byte) to the line holding byte ``end`` - 1."""
    number = 0
    offset = start
    with path.open("rb", buffering=_BUFFER) as fh:
        fh.seek(start)
        for raw in fh:
            if end is not None and offset >= end:
                return
            after = offset + len(raw)
            for part, line in enumerate(_lines(raw)):
                number += 1
                yield TraceLine(number, offset, part, after, *_decoded(line))
            offset = after


def _decoded(line: bytes) -> tuple[list[ReadSpan], str]:
    """The line's spans and "", or no spans and why it cannot be read: fast where it can, else plainly."""
    spans = _fast_spans(line)
    if spans is not None:
        return spans, ""
    try:
        return _plain_spans(line), ""
    except _UNREADABLE as exc:
        return [], f"{type(exc).__name__}: {exc}"


def read_line_at(path: Path, offset: int, part: int) -> list[ReadSpan]:
    """The spans of one line found by ``read_lines`` (none if it cannot be read now)."""
    with path.open("rb") as fh:
        fh.seek(offset)
        lines = list(_lines(fh.readline()))
    return _decoded(lines[part])[0] if part < len(lines) else []


def read_trace_file(path: Path, problems: ReadProblems) -> Iterator[ReadSpan]:
    """Spans from every readable line of ``path``; unreadable lines go to ``problems``."""
    for line in read_lines(path):
        if line.unreadable:
            problems.add(unreadable_message(path, line.number, line.unreadable))
        yield from line.spans


def trace_files(path: Path) -> list[Path]:
    """A trace file itself, or every ``*.jsonl`` under a folder."""
    if path.is_file():
        return [path]
    return sorted(path.rglob("*.jsonl"))
