"""OTLP JSON, the OpenTelemetry Collector's file format: one ``TracesData`` object per line.

Written straight from the lab's span records, as the protobuf JSON mapping of the
OTLP message the exporters send would read: fields in field-number order, fields
at their default left out (a oneof's value kept), 64-bit integers as strings,
enums as integers, and ids as hex (OTLP JSON's rule; protobuf's mapping gives
base64). A test holds this against the protobuf encoding of the same spans.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
from opentelemetry.util.types import AttributeValue

from pipeline.tracing.records import SpanEvent, SpanRecord

Json = dict[str, Any]

_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200  # OTLP SpanFlags: the exporter always says whether the parent is remote


def any_value(value: object) -> Json:
    """An attribute value as an OTLP ``AnyValue``; the common types first, by exact type."""
    kind = type(value)
    if kind is str:
        return {"stringValue": value}
    if kind is int:
        return {"intValue": str(value)}
    if kind is bool:
        return {"boolValue": value}
    if kind is float and math.isfinite(value):  # type: ignore[arg-type]
        return {"doubleValue": value}
    return _other_value(value)


def _other_value(value: object) -> Json:
    """Subclasses, non-finite floats, bytes, sequences and mappings, in the order the OTLP encoder tests them."""
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": bool(value)}
    if isinstance(value, str):
        return {"stringValue": str.__str__(value)}  # its characters, as protobuf keeps them (not an enum's name)
    if isinstance(value, int):
        return {"intValue": str(int(value))}
    if isinstance(value, float):
        number = float(value)
        return {"doubleValue": number if math.isfinite(number) else ("NaN" if math.isnan(number) else _inf(number))}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Sequence):
        values = [any_value(v) for v in value]
        return {"arrayValue": {"values": values} if values else {}}
    if isinstance(value, Mapping):
        pairs = key_values((str(k), v) for k, v in value.items())
        return {"kvlistValue": {"values": pairs} if pairs else {}}
    return {"stringValue": str(value)}  # the SDK keeps what it cannot encode as its string


def _inf(number: float) -> str:
    return "Infinity" if number > 0 else "-Infinity"


def key_values(items: Iterable[tuple[str, AttributeValue | object]]) -> list[Json]:
    return [{"key": key, "value": any_value(value)} for key, value in items]


def _dropped(container: object) -> int:
    """What the SDK's bounded attributes dropped over their limit (``sdk_spans.within_limits``); 0 for a dict."""
    return int(getattr(container, "dropped", 0))


def _event(event: SpanEvent) -> Json:
    data: Json = {"timeUnixNano": str(event.time_ns), "name": event.name}
    if event.attributes:
        data["attributes"] = key_values(event.attributes.items())
        if dropped := _dropped(event.attributes):
            data["droppedAttributesCount"] = dropped
    return data


def span_json(span: SpanRecord) -> Json:
    data: Json = {"traceId": f"{span.trace_id:032x}", "spanId": f"{span.span_id:016x}"}
    if span.parent is not None:
        data["parentSpanId"] = f"{span.parent.span_id:016x}"
    data["name"] = span.name
    data["kind"] = span.kind
    if span.start_ns:
        data["startTimeUnixNano"] = str(span.start_ns)
    if span.end_ns:
        data["endTimeUnixNano"] = str(span.end_ns)
    if span.attributes:
        data["attributes"] = key_values(span.attributes.items())
        if dropped := _dropped(span.attributes):
            data["droppedAttributesCount"] = dropped
    if span.events:
        data["events"] = [_event(e) for e in span.events]
        if span.dropped_events:
            data["droppedEventsCount"] = span.dropped_events
    data["status"] = _status(span.error)
    data["flags"] = _HAS_IS_REMOTE | _IS_REMOTE if span.parent is not None and span.parent.remote else _HAS_IS_REMOTE
    return data


def _status(error: str | None) -> Json:
    if error is None:
        return {}
    return {"message": error, "code": 2} if error else {"code": 2}


def traces_data(resource: Mapping[str, AttributeValue], scope_name: str, spans: Sequence[SpanRecord]) -> Json:
    """One ``TracesData`` object: the spans of one resource (its attributes) and one instrumentation scope."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": key_values(resource.items())},
                "scopeSpans": [{"scope": {"name": scope_name}, "spans": [span_json(s) for s in spans]}],
            }
        ]
    }


def dumps_line(data: Json) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n"


_ENCODER = msgspec.json.Encoder()


def encode_line(data: Json, resource: Mapping[str, AttributeValue], spans: Sequence[SpanRecord]) -> bytes:
    """``dumps_line``'s bytes for the line ``traces_data`` made, ten times faster when it can be.

    msgspec writes every string and integer as ``json.dumps`` does, and every float
    in plain notation (1e-4 <= |x| < 1e16) too; a float it would write with an
    exponent its own way (``1e16``, not ``1e+16``) sends the line to ``json``."""
    if _plain(resource.values()) and all(_plain_floats(span) for span in spans):
        return _ENCODER.encode(data) + b"\n"
    return dumps_line(data).encode()


def _plain_floats(span: SpanRecord) -> bool:
    return _plain(span.attributes.values()) and all(_plain(e.attributes.values()) for e in span.events if e.attributes)


def _plain(values: Iterable[object]) -> bool:
    """Every value a str, int, bool, plain-notation float, or a list or tuple of those (exact types only)."""
    for value in values:
        kind = type(value)
        if kind is float:
            if not (1e-4 <= abs(value) < 1e16 or value == 0.0):  # type: ignore[arg-type]
                return False
        elif kind is list or kind is tuple:
            if not _plain(value):  # type: ignore[arg-type]
                return False
        elif kind is not str and kind is not int and kind is not bool:
            return False
    return True
