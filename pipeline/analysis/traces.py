"""Reads OTLP JSON trace files (Collector file format) into plain span records.

Works on any such file: ours, a Jaeger ``/api/v3`` export, a Collector's file
exporter. Lines that cannot be read are reported, not fatal.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

AttrValue = str | bool | int | float | list[Any] | None


@dataclass(frozen=True, slots=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: dict[str, AttrValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SpanRecord:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AttrValue]
    events: tuple[SpanEvent, ...]
    status_code: int = 0

    def event_ns(self, name: str) -> int | None:
        return next((e.time_ns for e in self.events if e.name == name), None)


@dataclass(slots=True)
class ReadProblems:
    """What could not be read, with where it was."""

    messages: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        self.messages.append(message)


def _finite(number: float) -> float:
    if not math.isfinite(number):
        raise ValueError(f"non-finite number {number!r} in a trace")
    return number


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not a number a trace may hold")


def any_value(value: dict[str, Any]) -> AttrValue:
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
        return [any_value(v) for v in value["arrayValue"].get("values", [])]
    return None


def _attributes(items: Iterable[dict[str, Any]]) -> dict[str, AttrValue]:
    return {item["key"]: any_value(item.get("value", {})) for item in items}


def spans_from_traces_data(data: dict[str, Any]) -> list[SpanRecord]:
    """All spans of one ``TracesData`` object (one line of a trace file)."""
    out = []
    for resource_spans in data.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                out.append(
                    SpanRecord(
                        trace_id=span["traceId"],
                        span_id=span["spanId"],
                        parent_span_id=span.get("parentSpanId", ""),
                        name=span["name"],
                        start_ns=int(span["startTimeUnixNano"]),
                        end_ns=int(span["endTimeUnixNano"]),
                        attributes=_attributes(span.get("attributes", [])),
                        events=tuple(
                            SpanEvent(
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


def read_trace_file(path: Path, problems: ReadProblems) -> Iterator[SpanRecord]:
    """Spans from every readable line of ``path``; unreadable lines go to ``problems``."""
    with path.open(encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line, parse_constant=_no_constants)
                yield from spans_from_traces_data(data)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                problems.add(f"{path}:{number}: unreadable trace line ({type(exc).__name__}: {exc})")


def trace_files(path: Path) -> list[Path]:
    """A trace file itself, or every ``*.jsonl`` under a folder."""
    if path.is_file():
        return [path]
    return sorted(path.rglob("*.jsonl"))
