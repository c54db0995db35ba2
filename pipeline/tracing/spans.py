"""A turn's timeline -> span records: the turn span and one child per stage activity.

Spans are built from the recorder's stamps with explicit start and end times, so
nothing here sits on the hot path and virtual-clock runs export exact times. The
turn span comes last in the list, after its children, as a tracer that ends
children before their parent would hand them over.
"""

from __future__ import annotations

from opentelemetry.util.types import AttributeValue

from pipeline.events import VadDecision
from pipeline.tracing import names
from pipeline.tracing.records import Attributes as Attributes  # re-exported for callers
from pipeline.tracing.records import SpanIds, SpanParent, SpanRecord
from pipeline.tracing.timeline import (
    CallTiming,
    DeviceTiming,
    JobTimeline,
    SentenceTiming,
    StageCpu,
    ToolTiming,
    TtsTiming,
    TurnTimeline,
)


class _Children:
    """Makes the turn's child spans, each with its stage's attributes, in the order they are made."""

    def __init__(self, ids: SpanIds, turn: SpanParent, tl: TurnTimeline, end: int) -> None:
        self._ids, self._turn, self._tl, self.end = ids, turn, tl, end
        self.spans: list[SpanRecord] = []

    def __call__(
        self, name: str, start: int, stop: int | None, role: str, extra: Attributes | None = None
    ) -> SpanRecord:
        """A child span; one that never stopped ends with the turn, marked unfinished."""
        attrs: dict[str, AttributeValue] = dict(extra) if extra else {}
        info = self._tl.stages.get(role)
        if info is not None:
            attrs[names.STAGE_IMPL] = info.impl
            attrs[names.STAGE_SCRIPTED] = info.scripted
            for key, value in info.attributes:
                attrs["lab." + key] = value
        span = self._ids.span(name, self._turn, start, self.end if stop is None else stop, attrs)
        if stop is None:
            span.error = "unfinished"
        self.spans.append(span)
        return span


def build_turn_spans(
    ids: SpanIds, parent: SpanParent | None, tl: TurnTimeline, attributes: Attributes, turn_id: int | None = None
) -> list[SpanRecord]:
    """The turn span and one child per stage activity, children first; ``turn_id``: the turn span's id, drawn ahead."""
    end = tl.end_ns if tl.end_ns is not None else tl.start_ns
    turn = ids.span(names.TURN, parent, tl.start_ns, end, _turn_attributes(tl, attributes), span_id=turn_id)
    if tl.vad.user_speech_end_ns is not None:
        turn.add_event(names.EV_USER_SPEECH_END, tl.vad.user_speech_end_ns)
    if tl.vad.true_end_ns is not None:
        turn.add_event(names.EV_TRUE_SPEECH_END, tl.vad.true_end_ns)
    if not tl.ok:
        turn.error = tl.error_type
    child = _Children(ids, turn.as_parent(), tl, end)
    _vad_span(tl, child)
    _asr_span(tl, child)
    for call in tl.calls:
        _llm_spans(call, child)
    for tool in tl.tools:
        _tool_span(tool, child)
    for sentence in tl.sentences:
        _sentence_span(sentence, child)
    for tts in tl.tts:
        _tts_span(tts, child)
    _playback_span(tl, child)
    if tl.device is not None:
        _device_span(tl.device, child)
    _downlink_span(tl, child)
    return [*child.spans, turn]


def _turn_attributes(tl: TurnTimeline, attributes: Attributes) -> Attributes:
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
    attrs[names.SCRIPTED] = ",".join(sorted(role for role, info in tl.stages.items() if info.scripted))
    for role, info in tl.stages.items():
        attrs[names.IMPL_PREFIX + role] = info.impl
    return attrs


def _vad_span(tl: TurnTimeline, child: _Children) -> None:
    vad = tl.vad
    if vad.first_frame_ns is None:
        return
    extra: Attributes = {}
    if vad.speech_start_offset_ms is not None:
        extra[names.SPEECH_START_MS] = vad.speech_start_offset_ms
    if vad.speech_end_offset_ms is not None:
        extra[names.SPEECH_END_MS] = vad.speech_end_offset_ms
    if vad.declared_at_ms is not None:
        extra[names.DECLARED_AT_MS] = vad.declared_at_ms
    span = child(names.VAD, vad.first_frame_ns, vad.end_ns, "vad", extra)
    if vad.speech_start_ns is not None:
        span.add_event(names.EV_SPEECH_START, vad.speech_start_ns)
    if vad.user_speech_end_ns is not None:
        span.add_event(names.EV_USER_SPEECH_END, vad.user_speech_end_ns)
    for t, decision in vad.decisions:
        span.add_event(names.EV_VAD_DECISION, t, _decision(decision))


def _decision(d: VadDecision) -> Attributes:
    """A VAD decision as its event's attributes (what it did not measure left out)."""
    attrs: Attributes = {
        names.DECISION_VERDICT: d.verdict,
        names.DECISION_AT_MS: d.at_ms,
        names.SPEECH_END_MS: d.speech_end_ms,
    }
    if d.probability is not None:
        attrs[names.DECISION_PROBABILITY] = d.probability
    if d.cpu_ns is not None:
        attrs[names.DECISION_CPU_MS] = round(d.cpu_ns / 1e6, 3)
    if d.frames:
        attrs[names.DECISION_FRAMES] = d.frames
    return attrs


def _cpu(cpu: StageCpu | None) -> Attributes:
    """A stage's CPU as span attributes (none without a meter: simulated time)."""
    if cpu is None:
        return {}
    attrs: Attributes = {
        names.CPU_USER_MS: cpu.user_ms,
        names.CPU_SYSTEM_MS: cpu.system_ms,
        names.CPU_VOLUNTARY: cpu.voluntary,
        names.CPU_INVOLUNTARY: cpu.involuntary,
    }
    if cpu.other_ms is not None:
        attrs[names.CPU_OTHER_MS] = cpu.other_ms
    if cpu.steal_ms is not None:
        attrs[names.CPU_STEAL_MS] = cpu.steal_ms
    return attrs


def _asr_span(tl: TurnTimeline, child: _Children) -> None:
    if tl.asr.start_ns is not None:
        attrs: Attributes = {names.TRANSCRIPT: tl.asr.text, names.ASR_LANGUAGE: tl.asr.language, **_cpu(tl.asr.cpu)}
        child(names.ASR, tl.asr.start_ns, tl.asr.end_ns, "asr", attrs)


def _llm_spans(call: CallTiming, child: _Children) -> None:
    """The call's span, after its wait for the shared model's scheduler when it had one."""
    extra: Attributes = {
        names.GEN_AI_OPERATION: "chat",
        names.GEN_AI_MODEL: call.model,
        names.GEN_AI_MAX_TOKENS: call.max_tokens,
        names.GEN_AI_INPUT_TOKENS: call.input_tokens,
        names.GEN_AI_OUTPUT_TOKENS: call.output_tokens,
        names.CALL_INDEX: call.index,
        names.CALL_PURPOSE: call.purpose,
        **_cpu(call.cpu),
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
        span.add_event(names.EV_FIRST_CHUNK, call.token_ns[0])
    if call.first_token_ns is not None:
        span.add_event(names.EV_FIRST_TOKEN, call.first_token_ns)
    if call.tool_call_ns is not None:
        span.add_event(names.EV_TOOL_CALL, call.tool_call_ns)


def _tool_span(tool: ToolTiming, child: _Children) -> None:
    if tool.where == "device":
        _device_tool_span(tool, child)
    else:
        child(names.TOOL, tool.start_ns, tool.end_ns, "llm", {names.TOOL_NAME: tool.name})


def _device_tool_span(tool: ToolTiming, child: _Children) -> None:
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
        span.error = tool.error


def _sentence_span(sentence: SentenceTiming, child: _Children) -> None:
    attrs: Attributes = {
        names.SENTENCE_INDEX: sentence.index,
        names.SENTENCE_TEXT: sentence.text,
        names.SENTENCE_CALL: sentence.call_index,
    }
    span = child(names.SENTENCE, sentence.ref_ns, sentence.complete_ns, "sentences", attrs)
    span.add_event(names.EV_FIRST_TOKEN, sentence.first_token_ns)


def _tts_span(tts: TtsTiming, child: _Children) -> None:
    attrs: Attributes = {names.SENTENCE_INDEX: tts.sentence_index, names.AUDIO_MS: tts.audio_ms, **_cpu(tts.cpu)}
    span = child(names.TTS, tts.start_ns, tts.end_ns, "tts", attrs)
    if tts.first_frame_ns is not None:
        span.add_event(names.EV_FIRST_FRAME, tts.first_frame_ns)


def _playback_span(tl: TurnTimeline, child: _Children) -> None:
    pb = tl.playback
    if pb.first_start_ns is None:
        return
    span = child(names.PLAYBACK, pb.first_start_ns, pb.last_end_ns, "player", {names.AUDIO_MS: pb.audio_ms})
    for index, t in sorted(pb.sentence_start_ns.items()):
        span.add_event(names.EV_SENTENCE_AUDIO, t, {names.SENTENCE_INDEX: index})


def _device_span(device: DeviceTiming, child: _Children) -> None:
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
        names.STT_MESSAGES: len(device.stt_at),
        names.ANSWER_EDGES: device.answer_edges,
    }
    if device.settle_wait_ns:
        attrs[names.SETTLE_WAIT_MS] = device.settle_wait_ns / 1e6
    back = device.reconnection
    if back is not None:
        attrs[names.RECONNECT_TRIES] = len(back.failed) + (back.answered_ns is not None)
        if back.answered_ns is not None:
            attrs[names.RECONNECT_MS] = (back.answered_ns - back.lost_ns) / 1e6
            attrs[names.RECONNECT_WAIT_MS] = (back.answered_ns - back.woke_ns) / 1e6
    if device.temperature:
        attrs[names.TURN_TEMPERATURE] = device.temperature
    start = device.first_uplink_ns if device.first_uplink_ns is not None else child.end
    span = child(names.DEVICE, start, child.end, "device", attrs)
    for name, t in (
        (names.EV_LAST_UPLINK, device.last_uplink_ns),
        (names.EV_STT, device.stt_ns),
        (names.EV_LLM, device.llm_ns),
        (names.EV_FIRST_AUDIO_RECEIVED, device.first_audio_received_ns),
        (names.EV_FIRST_AUDIBLE, device.first_audible_ns),
        (names.EV_LAST_AUDIBLE, device.last_audible_ns),
        (names.EV_TTS_STOP, device.tts_stop_ns),
        (names.EV_ABORT, device.abort_ns),
        (names.EV_LAST_AUDIO_RECEIVED, device.last_audio_received_ns),
    ):
        if t is not None:
            span.add_event(name, t)
    for t in device.stt_at if len(device.stt_at) > 1 else ():
        span.add_event(names.EV_STT_MESSAGE, t)
    _reconnect_events(device, span)
    for index, (t, text) in enumerate(device.sentence_starts):
        span.add_event(names.EV_SENTENCE_START, t, {names.SENTENCE_INDEX: index, names.SENTENCE_TEXT: text})
    for t, kind, text in device.bot_marks:
        span.add_event(names.EV_BOT_MARK, t, {names.BOT_MARK: kind, **({names.BOT_TEXT: text} if text else {})})


def _reconnect_events(device: DeviceTiming, span: SpanRecord) -> None:
    """The connection lost, each try to open it again that failed, and the server answering again; a loss
    while idle and the tries before the turn come before the span's start."""
    if device.disconnected_ns is not None:
        span.add_event(names.EV_DISCONNECTED, device.disconnected_ns)
    back = device.reconnection
    if back is None:
        return
    for t, why in back.failed:
        span.add_event(names.EV_RECONNECT_FAILED, t, {names.ERROR_MESSAGE: why})
    if back.answered_ns is not None:
        span.add_event(names.EV_RECONNECTED, back.answered_ns)


def _downlink_span(tl: TurnTimeline, child: _Children) -> None:
    down = tl.downlink
    if down is not None:
        attrs: Attributes = {names.DOWNLINK_FRAMES_SENT: down.frames}
        child(names.DOWNLINK, down.first_sent_ns, down.last_sent_ns, "downlink", attrs)


def build_job_spans(
    ids: SpanIds, parent: SpanParent | None, job: JobTimeline, attributes: Attributes
) -> list[SpanRecord]:
    """A background job's span, after its wait for the model as a child (its own line, never a turn)."""
    end = job.end_ns if job.end_ns is not None else job.start_ns
    attrs: Attributes = {**attributes, names.OK: not job.error_type, names.GEN_AI_OUTPUT_TOKENS: job.output_tokens}
    if job.error_type:
        attrs[names.ERROR_TYPE] = job.error_type
        attrs[names.ERROR_MESSAGE] = job.error_message
    span = ids.span(names.BACKGROUND_JOB, parent, job.start_ns, end, attrs)
    if job.error_type:
        span.error = job.error_type
    if job.first_token_ns is not None:
        span.add_event(names.EV_FIRST_TOKEN, job.first_token_ns)
    if job.queue is None:
        return [span]
    queue_attrs: Attributes = {names.PRIORITY: job.queue.priority}
    queue = ids.span(names.LLM_QUEUE, span.as_parent(), job.queue.enqueued_ns, job.queue.granted_ns, queue_attrs)
    return [queue, span]
