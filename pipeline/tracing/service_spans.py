"""A request one of the lab's services served (a speech service's ASR or TTS) -> one span.

The span has the in-process stage's name and stage attributes, so a trace from the
service reads like the pipeline's own; it is a child of the caller's span when the
caller sent a W3C ``traceparent``, else the root of a trace of its own. As with a
turn, the span is built after the fact from stamped times (the injected clock's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from pipeline.events import StageInfo
from pipeline.tracing import names
from pipeline.tracing.records import KIND_SERVER, SpanIds, SpanParent, SpanRecord
from pipeline.tracing.records import Attributes as Attributes  # re-exported for callers


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


def remote_parent(traceparent: str) -> SpanParent | None:
    """The caller's span named by a W3C ``traceparent``; None when there is none or it is malformed."""
    if not traceparent:
        return None
    remote = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    context = trace.get_current_span(remote).get_span_context()
    return SpanParent(context.trace_id, context.span_id, remote=True) if context.is_valid else None


def build_request_span(ids: SpanIds, parent: SpanParent | None, timing: RequestTiming) -> SpanRecord:
    """The request's span, under ``parent`` or (None) as the root of a new trace."""
    attrs: Attributes = stage_attributes(timing.stage) if timing.stage is not None else {}
    attrs.update(timing.attributes)
    attrs[names.OK] = timing.ok
    if not timing.ok:
        attrs[names.ERROR_TYPE] = timing.error_type
        attrs[names.ERROR_MESSAGE] = timing.error_message
    end = timing.end_ns if timing.end_ns is not None else timing.start_ns
    span = ids.span(timing.name, parent, timing.start_ns, end, attrs, kind=KIND_SERVER)
    for name, t in timing.events:
        span.add_event(name, t)
    if not timing.ok:
        span.error = timing.error_type
    return span
