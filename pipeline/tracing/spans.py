"""A turn's timeline -> OpenTelemetry spans: the turn span and one child per stage activity.

Spans are built from the recorder's stamps with explicit start and end times, so
the tracer never sits on the hot path and virtual-clock runs export exact times.
Children end before their parent, so every exporter sees a complete turn.
"""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Span
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue

from pipeline.tracing import names
from pipeline.tracing.timeline import DeviceTiming, JobTimeline, ToolTiming, TurnTimeline

Attributes = dict[str, AttributeValue]


def build_turn_spans(tracer: trace.Tracer, parent: Context | None, tl: TurnTimeline, attributes: Attributes) -> None:
    """Create the turn span and one child per stage activity, with the recorder's times."""
    end = tl.end_ns if tl.end_ns is not None else tl.start_ns
    attrs: Attributes = dict(attributes)
    attrs[names.OK] = tl.ok
    attrs[names.LEFTOVER_WAIT_MS] = round(tl.leftover_ns / 1e6, 3)
    if not tl.ok:
        attrs[names.ERROR_TYPE] = tl.error_type
        attrs[names.ERROR_MESSAGE] = tl.error_message
    if tl.packets is not None:
        attrs[names.PACKETS_RECEIVED] = tl.packets.received
        attrs[names.PACKETS_LOST] = tl.packets.lost
        attrs[names.PACKETS_LATE] = tl.packets.late
    if tl.dropped:
        attrs[names.DROPPED] = "; ".join(f"{what}={count}" for what, count in sorted(tl.dropped.items()))
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
        asr_attrs: Attributes = {names.TRANSCRIPT: tl.asr.text, names.ASR_LANGUAGE: tl.asr.language}
        child(names.ASR, tl.asr.start_ns, tl.asr.end_ns, "asr", asr_attrs)
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
        if call.cached_tokens is not None:
            extra[names.PROMPT_CACHED_TOKENS] = call.cached_tokens
        for key, value in call.server_timings:
            extra[names.SERVER_TIMING_PREFIX + key] = value
        if call.queue is not None:
            extra[names.PRIORITY] = call.queue.priority
            queue_attrs: Attributes = {names.CALL_INDEX: call.index, names.PRIORITY: call.queue.priority}
            child(names.LLM_QUEUE, call.queue.enqueued_ns, call.queue.granted_ns, "llm", queue_attrs)
        span = child(names.LLM_CALL, call.start_ns, call.end_ns, "llm", extra)
        if call.token_ns:
            span.add_event(names.EV_FIRST_CHUNK, timestamp=call.token_ns[0])
        if call.first_token_ns is not None:
            span.add_event(names.EV_FIRST_TOKEN, timestamp=call.first_token_ns)
        if call.tool_call_ns is not None:
            span.add_event(names.EV_TOOL_CALL, timestamp=call.tool_call_ns)
    for tool in tl.tools:
        if tool.where == "device":
            _device_tool_span(tool, child)
        else:
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
    if tl.device is not None:
        _device_span(tl.device, child, end)
    if tl.downlink is not None:
        down = tl.downlink
        child(
            names.DOWNLINK, down.first_sent_ns, down.last_sent_ns, "downlink", {names.DOWNLINK_FRAMES_SENT: down.frames}
        )
    for span, stop in pending:
        span.end(end_time=stop)
    turn.end(end_time=end)


def _device_tool_span(tool: ToolTiming, child: Callable[..., Span]) -> None:
    """A tool run on the device: its ``tools/call`` round trip over the device's link, in place of a ``tool``
    span; not the LLM stage's (its impl is not the tool's), so no stage attributes."""
    attrs: Attributes = {
        names.TOOL_NAME: tool.name,
        names.TOOL_WHERE: tool.where,
        names.RPC_REQUEST_ID: tool.call_id,
        names.OK: not tool.error,
    }
    if tool.error:
        attrs[names.ERROR_MESSAGE] = tool.error
    span = child(names.DEVICE_TOOL_CALL, tool.start_ns, tool.end_ns, "device.tool", attrs)
    if tool.error:
        span.set_status(Status(StatusCode.ERROR, tool.error))


def _device_span(device: DeviceTiming, child: Callable[..., Span], end: int) -> None:
    """The device's span: one event per message or frame that marks a moment of the turn."""
    attrs: Attributes = {
        names.TRANSPORT: device.transport,
        names.PROTOCOL_VERSION: device.protocol_version,
        names.TRANSCRIPT: device.transcript,
        names.UPLINK_FRAMES: device.uplink_frames,
        names.DOWNLINK_FRAMES: device.downlink_frames,
        names.UNDECODABLE_FRAMES: device.undecodable_frames,
        names.DROPPED_FRAMES: device.dropped_frames,
        names.RECONNECTS: device.reconnects,
    }
    start = device.first_uplink_ns if device.first_uplink_ns is not None else end
    span = child(names.DEVICE, start, end, "device", attrs)
    for name, t in (
        (names.EV_LAST_UPLINK, device.last_uplink_ns),
        (names.EV_STT, device.stt_ns),
        (names.EV_LLM, device.llm_ns),
        (names.EV_FIRST_AUDIO_RECEIVED, device.first_audio_received_ns),
        (names.EV_FIRST_AUDIBLE, device.first_audible_ns),
        (names.EV_TTS_STOP, device.tts_stop_ns),
        (names.EV_ABORT, device.abort_ns),
        (names.EV_LAST_AUDIO_RECEIVED, device.last_audio_received_ns),
    ):
        if t is not None:
            span.add_event(name, timestamp=t)
    for index, (t, text) in enumerate(device.sentence_starts):
        span.add_event(
            names.EV_SENTENCE_START, attributes={names.SENTENCE_INDEX: index, names.SENTENCE_TEXT: text}, timestamp=t
        )


def build_job_spans(tracer: trace.Tracer, parent: Context | None, job: JobTimeline, attributes: Attributes) -> None:
    """A background job's span, with its wait for the model as a child (its own line, never a turn)."""
    end = job.end_ns if job.end_ns is not None else job.start_ns
    attrs: Attributes = {**attributes, names.OK: not job.error_type, names.GEN_AI_OUTPUT_TOKENS: job.output_tokens}
    if job.error_type:
        attrs[names.ERROR_TYPE] = job.error_type
        attrs[names.ERROR_MESSAGE] = job.error_message
    span = tracer.start_span(names.BACKGROUND_JOB, context=parent, attributes=attrs, start_time=job.start_ns)
    if job.error_type:
        span.set_status(Status(StatusCode.ERROR, job.error_type))
    if job.first_token_ns is not None:
        span.add_event(names.EV_FIRST_TOKEN, timestamp=job.first_token_ns)
    if job.queue is not None:
        ctx = trace.set_span_in_context(span)
        queue = tracer.start_span(
            names.LLM_QUEUE,
            context=ctx,
            attributes={names.PRIORITY: job.queue.priority},
            start_time=job.queue.enqueued_ns,
        )
        queue.end(end_time=job.queue.granted_ns)
    span.end(end_time=end)
