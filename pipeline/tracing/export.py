"""One run's tracer: spans of each finished turn to a trace file line, and optionally over the wire.

Each finished turn is written at once as one OTLP JSON line to the run's trace
file; when an OTLP endpoint is configured the same spans also go over the wire,
in a background thread with a short timeout, so a missing collector never blocks
or breaks a run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from pipeline.tracing import names
from pipeline.tracing.otlp_json import dumps_line, spans_to_otlp_json
from pipeline.tracing.requests import RequestTiming, build_request_span, remote_parent
from pipeline.tracing.spans import Attributes, build_job_spans, build_turn_spans
from pipeline.tracing.timeline import JobTimeline, TurnTimeline


@dataclass(frozen=True, slots=True)
class OtlpSettings:
    """Where to send spans over the wire; built by an entry point from OTEL_* variables."""

    endpoint: str  # full traces URL for http/protobuf, host:port or URL for grpc
    protocol: str = "http/protobuf"
    timeout_s: float = 2.0


class _LineBuffer(SpanProcessor):
    """Collects ended spans until the caller writes them out as one line."""

    def __init__(self) -> None:
        self._spans: list[ReadableSpan] = []
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self._spans.append(span)

    def take(self) -> list[ReadableSpan]:
        with self._lock:
            taken, self._spans = self._spans, []
        return taken


class _ReservableIds(RandomIdGenerator):
    """Random ids, except that a turn span's id can be drawn ahead of time (``reserve``), so a
    device can name its turn in a ``traceparent`` before the turn's spans exist. Several devices
    of one run may hold reservations at once; each turn takes its own."""

    def __init__(self) -> None:
        self._next: int | None = None

    def reserve(self) -> int:
        return super().generate_span_id()

    def use_next(self, span_id: int) -> None:
        """The next span id generated is ``span_id``."""
        self._next = span_id

    def generate_span_id(self) -> int:
        if self._next is not None:
            span_id, self._next = self._next, None
            return span_id
        return super().generate_span_id()


class CountingExporter(SpanExporter):
    """Delegates to an exporter and counts what went through and what failed."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.sent = 0
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:  # an exporter bug must not take the run down
            result = SpanExportResult.FAILURE
        if result == SpanExportResult.SUCCESS:
            self.sent += len(spans)
        else:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def make_otlp_exporter(settings: OtlpSettings) -> SpanExporter:
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        endpoint = settings.endpoint
        insecure = not endpoint.startswith("https://")
        return GrpcExporter(endpoint=endpoint, insecure=insecure, timeout=settings.timeout_s)
    if settings.protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        return HttpExporter(endpoint=settings.endpoint, timeout=settings.timeout_s)
    raise ValueError(f"unsupported OTLP protocol {settings.protocol!r}; use http/protobuf or grpc")


class Tracing:
    """One run's tracer: a trace file, an optional OTLP exporter, a session span."""

    def __init__(
        self,
        trace_path: Path,
        service_name: str,
        otlp: OtlpSettings | None = None,
        exporter: SpanExporter | None = None,
        tee: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.trace_path = trace_path
        self.tee = tee  # also given every line written (a worker's lines, for its driver)
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        self._buffer = _LineBuffer()
        self._ids = _ReservableIds()
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": service_name}), id_generator=self._ids
        )
        self._provider.add_span_processor(self._buffer)
        self.otlp: CountingExporter | None = None
        self.otlp_endpoint = otlp.endpoint if otlp else ""
        inner = exporter or (make_otlp_exporter(otlp) if otlp else None)
        if inner is not None:
            self.otlp = CountingExporter(inner)
            self._provider.add_span_processor(BatchSpanProcessor(self.otlp, schedule_delay_millis=500))
        self._tracer = self._provider.get_tracer("voice-latency-lab")
        self._session: Span | None = None
        self._session_ctx: Context | None = None

    def start_session(self, attributes: Attributes, start_ns: int) -> None:
        span = self._tracer.start_span(names.SESSION, attributes=attributes, start_time=start_ns)
        assert isinstance(span, Span)
        self._session = span
        self._session_ctx = trace.set_span_in_context(span)

    def end_session(self, end_ns: int) -> dict[str, Any] | None:
        if self._session is not None:
            self._session.end(end_time=end_ns)
            self._session = None
        return self._write_line()

    def reserve_turn(self) -> str:
        """A W3C ``traceparent`` naming the next turn span this tracer emits (the session's trace)."""
        session = self._session.get_span_context() if self._session is not None else None
        trace_id = session.trace_id if session is not None else self._ids.generate_trace_id()
        return f"00-{trace_id:032x}-{self._ids.reserve():016x}-01"

    def emit_turn(
        self, timeline: TurnTimeline, attributes: Attributes, traceparent: str = "", reserved: str = ""
    ) -> dict[str, Any]:
        """Turn a finished turn into spans and write them as one line; returns that line's data.

        ``traceparent``: the turn span becomes a child of that remote span (a device's turn, seen
        from the server that served it), so both sides' spans form one trace. ``reserved``: what
        ``reserve_turn`` returned for this turn; its span id becomes the turn span's."""
        parent = self._session_ctx
        if traceparent:
            remote = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
            if trace.get_current_span(remote).get_span_context().is_valid:
                parent = remote
        if reserved:
            self._ids.use_next(int(reserved.split("-")[2], 16))  # the turn span is the first span built
        build_turn_spans(self._tracer, parent, timeline, attributes)
        line = self._write_line()
        assert line is not None
        return line

    def emit_job(self, job: JobTimeline, attributes: Attributes) -> dict[str, Any]:
        """A background job as spans in the session's trace, written as one line of its own."""
        build_job_spans(self._tracer, self._session_ctx, job, attributes)
        line = self._write_line()
        assert line is not None
        return line

    def emit_request(self, timing: RequestTiming, traceparent: str = "") -> dict[str, Any]:
        """A request a service served, as one span written as one line; returns that line's data.

        ``traceparent``: the caller's span, which the request's span joins; without one (or with
        a malformed one) the span is the root of a trace of its own, never the session's."""
        build_request_span(self._tracer, remote_parent(traceparent), timing)
        line = self._write_line()
        assert line is not None
        return line

    def _write_line(self) -> dict[str, Any] | None:
        spans = self._buffer.take()
        if not spans:
            return None
        data = spans_to_otlp_json(spans)
        self.add_line(data)
        if self.tee is not None:
            self.tee(data)
        return data

    def add_line(self, data: dict[str, Any]) -> None:
        """Append a line another tracer wrote (a worker's), as it wrote it, to this run's trace file."""
        with self.trace_path.open("a", encoding="utf-8") as fh:
            fh.write(dumps_line(data))
            fh.flush()

    def shutdown(self) -> None:
        self._provider.shutdown()
