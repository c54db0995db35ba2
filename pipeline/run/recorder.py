"""The single timing wrapper: it watches every stage's input and output streams.

A stage never reads the clock. The recorder stamps each event as it passes a
stage boundary (when the stage takes an input, when it yields an output) and
files the stamp in the turn's timeline. Because the same wrapper times every
implementation, "first token" or "first frame" means the same thing for a
scripted stage, a local model and a cloud endpoint.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from pipeline.clock import Clock
from pipeline.events import (
    FRAME_MS,
    AudioFrame,
    AudioOut,
    CallEnd,
    CallStart,
    Event,
    OutputStart,
    QueueWait,
    Sentence,
    SpeechEnd,
    SpeechStart,
    Stage,
    TokenDelta,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    Transcript,
    VadDecision,
)
from pipeline.run.cpu import CpuMeter, CpuReading
from pipeline.run.device_side import frame_holding
from pipeline.tracing.timeline import (
    CallTiming,
    DownlinkTiming,
    QueueTiming,
    SentenceTiming,
    StageCpu,
    ToolTiming,
    TtsTiming,
    TurnTimeline,
)

Handler = Callable[[Event, int], None]
Observer = Callable[[str, Event], None]  # (role, event) for each stage output, after it is stamped


class TurnRecorder:
    """Stamps the events of one turn into a ``TurnTimeline``."""

    def __init__(self, clock: Clock, observer: Observer | None = None, meter: CpuMeter | None = None) -> None:
        self._clock = clock
        self._observer = observer
        self._meter = meter
        self._cpu_from: dict[tuple[str, int], CpuReading] = {}  # (role, sentence or call) -> its start's reading
        self.timeline = TurnTimeline(start_ns=clock.now_ns())
        self._leftover_from = self.timeline.start_ns
        self._inputs: dict[str, Handler] = {
            "asr": self._asr_in,
            "tts": self._tts_in,
            "player": self._player_in,
        }
        self._outputs: dict[str, Handler] = {
            "vad": self._vad_out,
            "asr": self._asr_out,
            "llm": self._llm_out,
            "sentences": self._sentences_out,
            "tts": self._tts_out,
            "player": self._player_out,
        }

    def receive(self, uplink: AsyncIterator[Event]) -> AsyncIterator[Event]:
        """Stamp each uplink frame as it reaches the server, before any stage is free to take it."""
        return self._tap(self._uplink_in, uplink)

    def wrap(self, role: str, stage: Stage, source: AsyncIterator[Event]) -> AsyncIterator[Event]:
        """Run ``stage`` on ``source``, stamping what goes in and what comes out."""
        self.timeline.stages[role] = stage.info
        outputs = self._tap(self._outputs.get(role), stage.run(self._tap(self._inputs.get(role), source)))
        return outputs if self._observer is None else self._observe(role, outputs)

    async def _tap(self, handler: Handler | None, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        async for event in events:
            if handler is not None:
                handler(event, self._clock.now_ns())
            yield event

    async def _observe(self, role: str, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        """Shows every stage output to the observer (a transport telling the device what happened)."""
        assert self._observer is not None
        async for event in events:
            self._observer(role, event)
            yield event

    def _cpu_start(self, role: str, key: int) -> None:
        if self._meter is not None:
            self._cpu_from[(role, key)] = self._meter.read()

    def _cpu_end(self, role: str, key: int) -> StageCpu | None:
        start = self._cpu_from.pop((role, key), None)
        return None if self._meter is None or start is None else self._meter.between(start, self._meter.read())

    def sent(self) -> None:
        """A server's transport has just sent one frame of answer audio down to the device."""
        now, down = self._clock.now_ns(), self.timeline.downlink
        if down is None:
            self.timeline.downlink = DownlinkTiming(now, now)
        else:
            down.last_sent_ns, down.frames = now, down.frames + 1

    def fail(self, error_type: str, message: str) -> None:
        """Record the first failure of the turn; later ones are consequences."""
        if not self.timeline.error_type:
            self.timeline.error_type = error_type
            self.timeline.error_message = message

    def leftover_started(self) -> None:
        """The turn is over (or cancelled); what its stages still run is waited for from now."""
        self._leftover_from = self._clock.now_ns()

    def leftover_done(self) -> None:
        """Nothing of this turn runs any more: the next turn starts clean (its stage times hold no leftover)."""
        self.timeline.leftover_ns = self._clock.now_ns() - self._leftover_from

    def finish(self) -> TurnTimeline:
        tl = self.timeline
        if tl.ok and tl.playback.last_end_ns is not None:
            tl.end_ns = tl.playback.last_end_ns
        else:
            tl.end_ns = self._clock.now_ns()
        return tl

    # --- inputs: the moment a stage takes an item -------------------------------

    def _uplink_in(self, event: Event, t: int) -> None:
        if isinstance(event, AudioFrame):
            if self.timeline.vad.first_frame_ns is None:
                self.timeline.vad.first_frame_ns = t
            self.timeline.vad.frame_arrival_ns[event.seq] = t

    def _asr_in(self, event: Event, t: int) -> None:
        if isinstance(event, SpeechEnd):
            self.timeline.asr.start_ns = t
            self._cpu_start("asr", 0)

    def _tts_in(self, event: Event, t: int) -> None:
        if isinstance(event, Sentence):
            self.timeline.tts.append(TtsTiming(sentence_index=event.index, start_ns=t))
            self._cpu_start("tts", event.index)

    def _player_in(self, event: Event, t: int) -> None:
        if isinstance(event, AudioOut):
            pb = self.timeline.playback
            if pb.first_start_ns is None:
                pb.first_start_ns = t
            pb.sentence_start_ns.setdefault(event.sentence_index, t)

    # --- outputs: the moment a stage yields an item -----------------------------

    def _vad_out(self, event: Event, t: int) -> None:
        vad = self.timeline.vad
        if isinstance(event, SpeechStart):
            vad.speech_start_ns = t
            vad.speech_start_offset_ms = event.offset_ms
        elif isinstance(event, SpeechEnd):
            vad.end_ns = t
            vad.speech_end_offset_ms = event.offset_ms
            # The user stopped speaking when the frame holding the last speech arrived.
            vad.user_speech_end_ns = vad.frame_arrival_ns.get(frame_holding(event.offset_ms), t)
            vad.declared_at_ms = (max(vad.frame_arrival_ns) + 1) * FRAME_MS if vad.frame_arrival_ns else None
        elif isinstance(event, VadDecision):
            vad.decisions.append((t, event))

    def _asr_out(self, event: Event, t: int) -> None:
        if isinstance(event, Transcript):
            self.timeline.asr.end_ns = t
            self.timeline.asr.cpu = self._cpu_end("asr", 0)
            self.timeline.asr.text = event.text
            self.timeline.asr.language = event.language

    def _llm_out(self, event: Event, t: int) -> None:
        calls = self.timeline.calls
        if isinstance(event, CallStart):
            calls.append(
                CallTiming(
                    index=event.index,
                    purpose=event.purpose,
                    model=event.model,
                    max_tokens=event.max_tokens,
                    start_ns=t,
                    server_address=event.server_address,
                    input_tokens=event.input_tokens,
                )
            )
            self._cpu_start("llm", event.index)
        elif isinstance(event, QueueWait) and calls:
            # the scheduler's own readings: the wait is measured where it happened, not where it passed
            calls[-1].queue = QueueTiming(event.enqueued_ns, event.granted_ns, event.priority)
        elif isinstance(event, TokenDelta) and calls:
            call = calls[-1]
            call.token_ns.append(t)
            if event.text.strip():
                self._first_output(call, t)
        elif isinstance(event, (ToolCallDelta, OutputStart)) and calls:
            # M1: a tool call's first piece is the call's first output, as a first token is
            self._first_output(calls[-1], t)
        elif isinstance(event, ToolCall) and calls:
            calls[-1].tool_name = event.name
            calls[-1].tool_call_ns = t
            self._first_output(calls[-1], t)
        elif isinstance(event, CallEnd) and calls:
            call = calls[-1]
            call.end_ns = t
            call.finish_reason = event.finish_reason
            call.output_tokens = event.output_tokens
            call.input_tokens = event.input_tokens or call.input_tokens
            call.cached_tokens = event.cached_tokens
            call.server_timings = event.server_timings
        elif isinstance(event, ToolResult):
            start = calls[-1].end_ns if calls and calls[-1].end_ns is not None else t
            self.timeline.tools.append(
                ToolTiming(event.name, start, t, where=event.where, call_id=event.call_id, error=event.error)
            )

    def _first_output(self, call: CallTiming, t: int) -> None:
        if call.first_token_ns is None:
            call.first_token_ns = t
            call.cpu = self._cpu_end("llm", call.index)

    def _sentences_out(self, event: Event, t: int) -> None:
        if not isinstance(event, Sentence):
            return
        call = next((c for c in self.timeline.calls if c.index == event.call_index), None)
        ref = call.start_ns if call else t
        first = t
        if call is not None and 0 <= event.first_token < len(call.token_ns):
            first = call.token_ns[event.first_token]
        same_call = [s for s in self.timeline.sentences if s.call_index == event.call_index]
        if same_call:
            ref = max(ref, same_call[-1].complete_ns)
        self.timeline.sentences.append(
            SentenceTiming(
                index=event.index,
                text=event.text,
                call_index=event.call_index,
                ref_ns=min(ref, first),
                first_token_ns=first,
                complete_ns=t,
            )
        )

    def _tts_out(self, event: Event, t: int) -> None:
        if not isinstance(event, AudioOut):
            return
        tts = next((x for x in reversed(self.timeline.tts) if x.sentence_index == event.sentence_index), None)
        if tts is None:
            return
        if tts.first_frame_ns is None:
            tts.first_frame_ns = t
            tts.cpu = self._cpu_end("tts", event.sentence_index)
        tts.end_ns = t
        tts.audio_ms += event.duration_ms

    def _player_out(self, event: Event, t: int) -> None:
        if isinstance(event, AudioOut):
            self.timeline.playback.last_end_ns = t
            self.timeline.playback.audio_ms += event.duration_ms
