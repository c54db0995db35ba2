"""A request one of the lab's services served (a speech service's ASR or TTS) -> one span.

The span has the in-process stage's name and stage attributes, so a trace from the
service reads like the pipeline's own; it is a child of the caller's span when the
caller sent a W3C ``traceparent``, else the root of a trace of its own. As with a
turn, the span is built after the fact from stamped times (the injected clock's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from pipeline.events import StageInfo
from pipeline.tracing import names

Attributes = dict[str, AttributeValue]


@dataclass(slots=True)
class RequestTiming:
    """What the service saw of one request: epoch ns from the injected clock, and what it learnt."""

    name: str  # the stage's span name: names.ASR or names.TTS
    start_ns: int
    end_ns: int | None = None
    stage: StageInfo | None = None  # the stage that served it (None: refused before any stage was involved)
    attributes: Attributes = field(default_factory=dict)
    events: list[tuple[str, int]] = field(default_factory=list)
    error_type: str = ""
    error_message: str = ""

    @property
    def ok(self) -> bool:
        return not self.error_type


def stage_attributes(info: StageInfo) -> Attributes:
    """A stage's attributes as its in-process span carries them (``spans.build_turn_spans``)."""
    attrs: Attributes = {names.STAGE_IMPL: info.impl, names.STAGE_SCRIPTED: info.scripted}
    for key, value in info.attributes:
        attrs["lab." + key] = value
    return attrs


def remote_parent(traceparent: str) -> Context | None:
    """The caller's span named by a W3C ``traceparent``; None when there is none or it is malformed."""
    if not traceparent:
        return None
    remote = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    return remote if trace.get_current_span(remote).get_span_context().is_valid else None


def build_request_span(tracer: trace.Tracer, parent: Context | None, timing: RequestTiming) -> None:
    """The request's span, under ``parent`` or (None) as the root of a new trace."""
    attrs: Attributes = stage_attributes(timing.stage) if timing.stage is not None else {}
    attrs.update(timing.attributes)
    attrs[names.OK] = timing.ok
    if not timing.ok:
        attrs[names.ERROR_TYPE] = timing.error_type
        attrs[names.ERROR_MESSAGE] = timing.error_message
    # An empty Context, not None: None would adopt whatever span is current in the caller's context.
    span = tracer.start_span(
        timing.name, context=parent or Context(), kind=SpanKind.SERVER, attributes=attrs, start_time=timing.start_ns
    )
    for name, t in timing.events:
        span.add_event(name, timestamp=t)
    if not timing.ok:
        span.set_status(Status(StatusCode.ERROR, timing.error_type))
    span.end(end_time=timing.end_ns if timing.end_ns is not None else timing.start_ns)
