"""OpenTelemetry setup and the conversion of a turn's timeline into spans.

Spans are built from the recorder's stamps with explicit start and end times, so
the tracer never sits on the hot path and virtual-clock runs export exact times.
Each finished turn is written at once as one OTLP JSON line to the run's trace
file; when an OTLP endpoint is configured the same spans also go over the wire,
in a background thread with a short timeout, so a missing collector never blocks
or breaks a run.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue

from pipeline import spans as names
from pipeline.otlp_json import dumps_line, spans_to_otlp_json
from pipeline.timeline import TurnTimeline

Attributes = dict[str, AttributeValue]


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
    ) -> None:
        self.trace_path = trace_path
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        self._buffer = _LineBuffer()
        self._provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
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

    def emit_turn(self, timeline: TurnTimeline, attributes: Attributes) -> dict[str, Any]:
        """Turn a finished turn into spans and write them as one line; returns that line's data."""
        build_turn_spans(self._tracer, self._session_ctx, timeline, attributes)
        line = self._write_line()
        assert line is not None
        return line

    def _write_line(self) -> dict[str, Any] | None:
        spans = self._buffer.take()
        if not spans:
            return None
        data = spans_to_otlp_json(spans)
        with self.trace_path.open("a", encoding="utf-8") as fh:
            fh.write(dumps_line(data))
            fh.flush()
        return data

    def shutdown(self) -> None:
        self._provider.shutdown()


def build_turn_spans(tracer: trace.Tracer, parent: Context | None, tl: TurnTimeline, attributes: Attributes) -> None:
    """Create the turn span and one child per stage activity, with the recorder's times."""
    end = tl.end_ns if tl.end_ns is not None else tl.start_ns
    attrs: Attributes = dict(attributes)
    attrs[names.OK] = tl.ok
    if not tl.ok:
        attrs[names.ERROR_TYPE] = tl.error_type
        attrs[names.ERROR_MESSAGE] = tl.error_message
    scripted = sorted(role for role, info in tl.stages.items() if info.scripted)
    attrs[names.SCRIPTED] = ",".join(scripted)
    for role, info in tl.stages.items():
        attrs[names.IMPL_PREFIX + role] = info.impl
    turn = tracer.start_span(names.TURN, context=parent, attributes=attrs, start_time=tl.start_ns)
    if tl.vad.user_speech_end_ns is not None:
        turn.add_event(names.EV_USER_SPEECH_END, timestamp=tl.vad.user_speech_end_ns)
    if not tl.ok:
        turn.set_status(Status(StatusCode.ERROR, tl.error_type))
    ctx = trace.set_span_in_context(turn)

    # Children end before their parent, so every exporter sees a complete turn.
    pending: list[tuple[Span, int]] = []

    def child(name: str, start: int, stop: int | None, role: str, extra: Attributes | None = None) -> Span:
        info = tl.stages.get(role)
        span_attrs: Attributes = dict(extra or {})
        if info is not None:
            span_attrs[names.STAGE_IMPL] = info.impl
            span_attrs[names.STAGE_SCRIPTED] = info.scripted
            for key, value in info.attributes:
                span_attrs["lab." + key] = value
        span = tracer.start_span(name, context=ctx, attributes=span_attrs, start_time=start)
        assert isinstance(span, Span)
        if stop is None:
            span.set_status(Status(StatusCode.ERROR, "unfinished"))
        pending.append((span, end if stop is None else stop))
        return span

    vad = tl.vad
    if vad.first_frame_ns is not None:
        extra: Attributes = {}
        if vad.speech_start_offset_ms is not None:
            extra[names.SPEECH_START_MS] = vad.speech_start_offset_ms
        if vad.speech_end_offset_ms is not None:
            extra[names.SPEECH_END_MS] = vad.speech_end_offset_ms
        span = child(names.VAD, vad.first_frame_ns, vad.end_ns, "vad", extra)
        if vad.speech_start_ns is not None:
            span.add_event(names.EV_SPEECH_START, timestamp=vad.speech_start_ns)
        if vad.user_speech_end_ns is not None:
            span.add_event(names.EV_USER_SPEECH_END, timestamp=vad.user_speech_end_ns)
    if tl.asr.start_ns is not None:
        child(names.ASR, tl.asr.start_ns, tl.asr.end_ns, "asr", {names.TRANSCRIPT: tl.asr.text})
    for call in tl.calls:
        extra = {
            names.GEN_AI_OPERATION: "chat",
            names.GEN_AI_MODEL: call.model,
            names.GEN_AI_MAX_TOKENS: call.max_tokens,
            names.GEN_AI_INPUT_TOKENS: call.input_tokens,
            names.GEN_AI_OUTPUT_TOKENS: call.output_tokens,
            names.CALL_INDEX: call.index,
            names.CALL_PURPOSE: call.purpose,
        }
        if call.finish_reason:
            extra[names.GEN_AI_FINISH] = [call.finish_reason]
        if call.server_address:
            extra[names.SERVER_ADDRESS] = call.server_address
        if call.tool_name:
            extra[names.TOOL_NAME] = call.tool_name
        for key, value in call.server_timings:
            extra[names.SERVER_TIMING_PREFIX + key] = value
        span = child(names.LLM_CALL, call.start_ns, call.end_ns, "llm", extra)
        if call.token_ns:
            span.add_event(names.EV_FIRST_CHUNK, timestamp=call.token_ns[0])
        if call.first_token_ns is not None:
            span.add_event(names.EV_FIRST_TOKEN, timestamp=call.first_token_ns)
    for tool in tl.tools:
        child(names.TOOL, tool.start_ns, tool.end_ns, "llm", {names.TOOL_NAME: tool.name})
    for sentence in tl.sentences:
        span = child(
            names.SENTENCE,
            sentence.ref_ns,
            sentence.complete_ns,
            "sentences",
            {
                names.SENTENCE_INDEX: sentence.index,
                names.SENTENCE_TEXT: sentence.text,
                names.SENTENCE_CALL: sentence.call_index,
            },
        )
        span.add_event(names.EV_FIRST_TOKEN, timestamp=sentence.first_token_ns)
    for tts in tl.tts:
        span = child(
            names.TTS,
            tts.start_ns,
            tts.end_ns,
            "tts",
            {names.SENTENCE_INDEX: tts.sentence_index, names.AUDIO_MS: tts.audio_ms},
        )
        if tts.first_frame_ns is not None:
            span.add_event(names.EV_FIRST_FRAME, timestamp=tts.first_frame_ns)
    pb = tl.playback
    if pb.first_start_ns is not None:
        span = child(names.PLAYBACK, pb.first_start_ns, pb.last_end_ns, "player", {names.AUDIO_MS: pb.audio_ms})
        for index, t in sorted(pb.sentence_start_ns.items()):
            span.add_event(names.EV_SENTENCE_AUDIO, attributes={names.SENTENCE_INDEX: index}, timestamp=t)
    for span, stop in pending:
        span.end(end_time=stop)
    turn.end(end_time=end)
