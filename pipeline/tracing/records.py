"""The lab's own span records: a span as the lab builds it, after the fact, before it is a line or a message.

Every span the lab writes is built once its work is over, from stamped times, so
it needs none of a live tracer's machinery (context, sampling, locks, ending).
A ``SpanRecord`` holds what the OTLP span message holds; ``otlp_json`` writes it
as a trace file line and ``sdk_spans`` hands it to an OTLP exporter, so the file
and the wire carry the same spans.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.util.types import AttributeValue

Attributes = dict[str, AttributeValue]

KIND_INTERNAL = 1  # OTLP SpanKind values, as trace files carry them
KIND_SERVER = 2


class SpanParent(NamedTuple):
    """The span a new span hangs under: its trace, its id, and whether it lives in another process."""

    trace_id: int
    span_id: int
    remote: bool = False


@dataclass(slots=True)
class SpanEvent:
    """A span event as the lab records it before it is written (``analysis.traces.ReadEvent`` is one read back)."""

    name: str
    time_ns: int
    attributes: Mapping[str, AttributeValue] | None = None


@dataclass(slots=True)
class SpanRecord:
    """One finished span. ``error``: None while the status is unset, else the ERROR status's message."""

    name: str
    trace_id: int
    span_id: int
    parent: SpanParent | None
    start_ns: int
    end_ns: int
    attributes: Mapping[str, AttributeValue]
    kind: int = KIND_INTERNAL
    events: list[SpanEvent] = field(default_factory=list)
    error: str | None = None
    dropped_events: int = 0  # over the SDK's limit (``sdk_spans.within_limits``)

    def add_event(self, name: str, time_ns: int, attributes: Attributes | None = None) -> None:
        self.events.append(SpanEvent(name, time_ns, attributes))

    def as_parent(self) -> SpanParent:
        return SpanParent(self.trace_id, self.span_id)


class SpanIds:
    """Random trace and span ids, drawn as the OpenTelemetry SDK draws them."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def trace_id(self) -> int:
        return self._random.generate_trace_id()

    def span_id(self) -> int:
        return self._random.generate_span_id()

    def span(
        self,
        name: str,
        parent: SpanParent | None,
        start_ns: int,
        end_ns: int,
        attributes: Mapping[str, AttributeValue],
        kind: int = KIND_INTERNAL,
        span_id: int | None = None,
    ) -> SpanRecord:
        """A span under ``parent`` (in its trace), or the root of a new trace; ``span_id``: one drawn ahead."""
        trace_id = parent.trace_id if parent is not None else self.trace_id()
        return SpanRecord(name, trace_id, span_id or self.span_id(), parent, start_ns, end_ns, attributes, kind=kind)
