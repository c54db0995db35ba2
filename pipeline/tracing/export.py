"""One run's tracer: spans of each finished turn to a trace file line, and optionally over the wire.

Each finished turn is written at once as one OTLP JSON line to the run's trace
file; when an OTLP endpoint is configured the same spans also go over the wire,
in a background thread with a short timeout, so a missing collector never blocks
or breaks a run.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from pipeline.records.whole_lines import append_whole
from pipeline.tracing import names
from pipeline.tracing.otlp_json import dumps_line, encode_line, traces_data
from pipeline.tracing.records import Attributes, SpanIds, SpanRecord
from pipeline.tracing.sdk_spans import readable_span, within_limits
from pipeline.tracing.service_spans import RequestTiming, build_request_span, remote_parent
from pipeline.tracing.spans import build_job_spans, build_turn_spans
from pipeline.tracing.timeline import JobTimeline, TurnTimeline

SCOPE = "voice-latency-lab"  # the instrumentation scope every span of the lab's is written under
SERVICE = "voice-latency-lab"  # a run's OTLP service name unless OTEL_SERVICE_NAME names another


@dataclass(frozen=True, slots=True)
class OtlpSettings:
    """Where to send spans over the wire; from the OTEL_* variables of the environment an entry point hands over."""

    endpoint: str  # full traces URL for http/protobuf, host:port or URL for grpc
    protocol: str = "http/protobuf"
    timeout_s: float = 2.0


def otlp_from_env(env: Mapping[str, str]) -> OtlpSettings | None:
    """OTLP settings from the standard OTEL_* variables, or None when none is set."""
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    )
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not traces and not base:
        return None
    if protocol not in ("http/protobuf", "grpc"):
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: this tool exports http/protobuf or grpc")
    if traces:
        endpoint = traces
    elif protocol == "grpc":
        endpoint = base or ""
    else:
        endpoint = (base or "").rstrip("/") + "/v1/traces"
    timeout = float(env.get("OTEL_EXPORTER_OTLP_TIMEOUT", "2000")) / 1000
    return OtlpSettings(endpoint=endpoint, protocol=protocol, timeout_s=min(timeout, 10.0))


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
    """One run's tracer: a trace file, an optional OTLP exporter, a session span.

    Spans are the lab's own records (``records``), built after the fact and written
    straight as OTLP JSON; the SDK's span objects are made only for an OTLP exporter."""

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
        self._ids = SpanIds()
        self._resource = Resource.create({"service.name": service_name})
        self._scope = InstrumentationScope(SCOPE)
        self._limits = SpanLimits()  # the SDK's, from the OTEL_*_LIMIT variables, read once as its tracer would
        self.otlp: CountingExporter | None = None
        self.otlp_endpoint = otlp.endpoint if otlp else ""
        self._wire: BatchSpanProcessor | None = None
        inner = exporter or (make_otlp_exporter(otlp) if otlp else None)
        if inner is not None:
            self.otlp = CountingExporter(inner)
            self._wire = BatchSpanProcessor(self.otlp, schedule_delay_millis=500)
            atexit.register(self.shutdown)  # what is queued still goes out when a caller never shuts down
        self._session: SpanRecord | None = None

    def start_session(self, attributes: Attributes, start_ns: int) -> None:
        self._session = self._ids.span(names.SESSION, None, start_ns, start_ns, dict(attributes))

    def end_session(self, end_ns: int) -> dict[str, Any] | None:
        if self._session is None:
            return None
        session, self._session = self._session, None
        session.end_ns = end_ns
        return self._write([session])

    def reserve_turn(self) -> str:
        """A W3C ``traceparent`` naming the next turn span this tracer emits (the session's trace)."""
        trace_id = self._session.trace_id if self._session is not None else self._ids.trace_id()
        return f"00-{trace_id:032x}-{self._ids.span_id():016x}-01"

    def emit_turn(
        self, timeline: TurnTimeline, attributes: Attributes, traceparent: str = "", reserved: str = ""
    ) -> dict[str, Any]:
        """Turn a finished turn into spans and write them as one line; returns that line's data.

        ``traceparent``: the turn span becomes a child of that remote span (a device's turn, seen
        from the server that served it), so both sides' spans form one trace. ``reserved``: what
        ``reserve_turn`` returned for this turn; its span id becomes the turn span's."""
        parent = remote_parent(traceparent) or (self._session.as_parent() if self._session is not None else None)
        turn_id = int(reserved.split("-")[2], 16) if reserved else None
        return self._write(build_turn_spans(self._ids, parent, timeline, attributes, turn_id))

    def emit_job(self, job: JobTimeline, attributes: Attributes) -> dict[str, Any]:
        """A background job as spans in the session's trace, written as one line of its own."""
        parent = self._session.as_parent() if self._session is not None else None
        return self._write(build_job_spans(self._ids, parent, job, attributes))

    def emit_request(self, timing: RequestTiming, traceparent: str = "") -> dict[str, Any]:
        """A request a service served, as one span written as one line; returns that line's data.

        ``traceparent``: the caller's span, which the request's span joins; without one (or with
        a malformed one) the span is the root of a trace of its own, never the session's."""
        return self._write([build_request_span(self._ids, remote_parent(traceparent), timing)])

    def _write(self, spans: list[SpanRecord]) -> dict[str, Any]:
        for span in spans:
            within_limits(span, self._limits)
        data = traces_data(self._resource.attributes, SCOPE, spans)
        self._append(encode_line(data, self._resource.attributes, spans))
        if self.tee is not None:
            self.tee(data)
        if self._wire is not None:
            for span in spans:
                self._wire.on_end(readable_span(span, self._resource, self._scope))
        return data

    def add_line(self, data: dict[str, Any]) -> None:
        """Append a line another tracer wrote (a worker's), as it wrote it, to this run's trace file."""
        self._append(dumps_line(data).encode())

    def _append(self, line: bytes) -> None:
        append_whole(self.trace_path, line)  # a full disk leaves no half a turn behind (RecordWriteError)

    def shutdown(self) -> None:
        """Send what is still queued for the OTLP exporter, and stop it."""
        if self._wire is not None:
            wire, self._wire = self._wire, None
            atexit.unregister(self.shutdown)
            wire.shutdown()  # type: ignore[no-untyped-call]
