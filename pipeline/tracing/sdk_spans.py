"""The lab's span records as the OpenTelemetry SDK sees spans: within its limits, and as ``ReadableSpan``.

The SDK bounds what a span holds (128 attributes and 128 events unless the
``OTEL_*_LIMIT`` variables say otherwise) and a span built through it would be
cut to those limits; ``within_limits`` does the same to a record, with the SDK's
own containers, so a trace file line and an OTLP export carry what they did when
spans went through the SDK's tracer. ``readable_span`` is what an OTLP exporter
takes; it is built only when one is configured.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from pipeline.tracing.records import SpanEvent, SpanParent, SpanRecord

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def within_limits(span: SpanRecord, limits: SpanLimits) -> None:
    """Cut the span to the SDK's limits as its tracer would (oldest first); nothing to do within them."""
    attr_limit, attr_length = limits.max_span_attributes, limits.max_span_attribute_length
    if attr_length is not None or (attr_limit is not None and len(span.attributes) > attr_limit):
        span.attributes = BoundedAttributes(attr_limit, span.attributes, immutable=False, max_value_len=attr_length)
    if limits.max_events is not None and len(span.events) > limits.max_events:
        span.dropped_events += len(span.events) - limits.max_events
        span.events = span.events[len(span.events) - limits.max_events :]
    event_limit, event_length = limits.max_event_attributes, limits.max_attribute_length
    for event in span.events:
        if event.attributes and (
            event_length is not None or (event_limit is not None and len(event.attributes) > event_limit)
        ):
            event.attributes = BoundedAttributes(event_limit, event.attributes, max_value_len=event_length)


def _context(parent: SpanParent) -> SpanContext:
    return SpanContext(parent.trace_id, parent.span_id, is_remote=parent.remote, trace_flags=_SAMPLED)


def _events(events: Sequence[SpanEvent], dropped: int) -> Sequence[Event]:
    sdk_events = [Event(e.name, e.attributes, e.time_ns) for e in events]
    if not dropped:
        return sdk_events
    bounded = BoundedList.from_seq(len(sdk_events), sdk_events)
    bounded.dropped = dropped  # the SDK's count of what its limit cut, read by the exporter's encoder
    return bounded


def readable_span(span: SpanRecord, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    status = Status(StatusCode.UNSET) if span.error is None else Status(StatusCode.ERROR, span.error)
    return ReadableSpan(
        span.name,
        context=_context(SpanParent(span.trace_id, span.span_id)),
        parent=_context(span.parent) if span.parent is not None else None,
        resource=resource,
        attributes=span.attributes,
        events=_events(span.events, span.dropped_events),
        kind=SpanKind(span.kind - 1),  # OTLP numbers kinds from 1 (INTERNAL), the SDK's enum from 0
        status=status,
        start_time=span.start_ns,
        end_time=span.end_ns,
        instrumentation_scope=scope,
    )
