"""One turn on a device connection: the pipeline's server side, fed by the connection, told back as messages.

A turn runs the same instrumented stages as an in-process run (``serve_turn``); its stage
outputs become the protocol's messages (``stt``, ``tts start``, ``llm``, ``sentence_start``
before each sentence's audio, paced Opus frames, ``tts stop``). The session decides when a
turn starts and what stops it; the turn tells the session when it heard speech, end-pointed
and recognised an utterance, because continuous listening and barge-in hang on those moments.
A turn that fails before the device was told ``tts start`` tells it nothing, as the real server
sends nothing for an utterance it could not recognise (asr/base.py); one that fails after ends
with ``tts stop``, so the device is never left speaking.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from pipeline.clock import Clock
from pipeline.events import (
    FRAME_MS,
    AudioOut,
    Event,
    Sentence,
    SpeechEnd,
    SpeechStart,
    TokenDelta,
    Transcript,
    TurnEnd,
)
from pipeline.run.device_side import close, drain
from pipeline.run.recorder import TurnRecorder
from pipeline.run.turn import ServerStages, check_complete, serve_turn, supervise
from pipeline.tracing.timeline import PacketCounts, TurnTimeline
from pipeline.transport.server.channel import ServerChannel, tell
from pipeline.transport.server.pacing import DownlinkPacer, pacing
from pipeline.transport.server.requests import TurnRequest
from pipeline.transport.server.server_settings import SessionSettings
from pipeline.transport.server.texts import stt_text, wake_text
from pipeline.transport.server.uplink import Reframer
from pipeline.transport.wire.messages import Llm, Message, Stt, Tts
from pipeline.transport.wire.opus import OpusEncoder, encode_off_loop


class TurnWatcher(Protocol):
    """The session, told of the moments that continuous listening and barge-in hang on."""

    def endpointed(self, turn: ServerTurn) -> None: ...

    def recognised(self, turn: ServerTurn) -> None:
        """The turn's utterance is recognised, its ``stt`` not yet queued: older answers stop here."""


class ServerTurn:
    """One turn on one connection: the pipeline's server side, its uplink fed by the connection."""

    def __init__(
        self,
        channel: ServerChannel,
        request: TurnRequest,
        settings: SessionSettings,
        clock: Clock,
        watcher: TurnWatcher,
        packet_ms: int = FRAME_MS,
    ) -> None:
        self.channel, self.request, self.settings, self.watcher = channel, request, settings, watcher
        self.up: asyncio.Queue[object] = asyncio.Queue()
        self.outbox: asyncio.Queue[Message | AudioOut | TurnEnd] = asyncio.Queue()
        self.reframer = Reframer(packet_ms)
        self.encoder = OpusEncoder(preset=settings.downlink_codec)
        self.uplink_open = True
        self.packets: PacketCounts | None = None  # the uplink's packets, counted while it was open (UDP)
        self.aborted = False
        self.work: list[asyncio.Task[None]] = []
        self.stage_tasks: list[asyncio.Task[None]] = []
        self.texts: dict[int, str] = {}
        self.llm_told = False
        self.told_start = False  # the device was told ``tts start``: it is speaking this turn's answer
        # ``tts stop`` for this turn's answer has gone out: the abort handler sent it, or a newer turn's answer
        # took the device's speaker; either way this turn tells the device nothing more
        self.stop_sent = False
        # a listener (speech heard while listening on, or a listen start outside manual mode) is only a turn
        # once the VAD hears speech: the real server keeps listening to silence without a word or a limit
        self.candidate = request.started_by == "speech" or (request.started_by == "listen" and request.mode != "manual")
        self.speech = asyncio.Event()
        self.recorder = TurnRecorder(clock, observer=self.observe)
        self.virtual = clock.kind == "virtual"

    # --- the pipeline's side (run.device.ServerSide) ---------------------------

    @property
    def unheard(self) -> bool:
        """A listener whose VAD has heard no speech yet: not a turn, and dropped rather than failed."""
        return self.candidate and not self.speech.is_set()

    def uplink(self) -> AsyncIterator[Event]:
        return drain(self.up)

    async def send_down(self, event: Event) -> None:
        if isinstance(event, (AudioOut, TurnEnd)):
            self.outbox.put_nowait(event)

    def observe(self, role: str, event: Event) -> None:
        """Stage outputs that the device is told about, in the order the protocol tells them."""
        sid = self.request.session_id
        if role == "vad" and isinstance(event, SpeechStart):
            self.speech.set()
        elif role == "vad" and isinstance(event, SpeechEnd):
            self.watcher.endpointed(self)
        elif role == "asr" and isinstance(event, Transcript):
            self.speech.set()
            if not wake_text(event.text):  # recognised as nothing: the real server says nothing, asks no LLM
                self.abort("empty_transcript", "the utterance was recognised as nothing (the device is told nothing)")
                return
            self.watcher.recognised(self)
            if self.request.tells_stt:
                self.outbox.put_nowait(Stt(text=stt_text(event.text), session_id=sid))
            self.outbox.put_nowait(Tts("start", session_id=sid))
            self.told_start = True
        elif role == "llm" and isinstance(event, TokenDelta) and event.text.strip() and not self.llm_told:
            self.llm_told = True
            # the real server's default emotion (textUtils.py) when the text names none
            self.outbox.put_nowait(Llm(text="🙂", emotion="happy", session_id=sid))
        elif role == "sentences" and isinstance(event, Sentence):
            self.texts[event.index] = event.text

    # --- the connection's side ------------------------------------------------

    def audio(self, pcm: bytes, arrival_ns: int) -> None:
        """A device's decoded audio, into the uplink in 60 ms frames (dropped once the uplink is closed)."""
        if not self.uplink_open:
            return
        for frame in self.reframer.push(pcm, arrival_ns):
            self.up.put_nowait(frame)

    def close_uplink(self) -> None:
        if self.uplink_open:
            self.uplink_open = False
            if not self.request.typed:  # the channel counts afresh for the next listener: these are this turn's
                self.packets = self.channel.packet_counts()
            close(self.up)

    def abort(self, error_type: str, message: str) -> None:
        """Fail the turn with this reason and stop its work (the first failure recorded stays)."""
        self.recorder.fail(error_type, message)
        self.close_uplink()
        self.aborted = True
        for task in self.work:
            task.cancel()

    def tell_stop(self) -> Tts:
        """The ``tts stop`` that ends this turn's answer on the device; it is not to be sent twice."""
        self.stop_sent = True
        return Tts("stop", session_id=self.request.session_id)


async def run_server_turn(turn: ServerTurn, stages: ServerStages) -> TurnTimeline | None:
    """Run the pipeline for one turn and send its messages and audio; the server's own timeline.

    None: a turn started by listening on that never heard speech, which is no turn at all."""
    recorder = turn.recorder
    if turn.aborted:  # before it started
        return recorder.finish()
    turn.work = [
        asyncio.create_task(serve_turn(stages, recorder, turn, turn.stage_tasks)),
        asyncio.create_task(_send(turn)),
    ]
    if turn.candidate and not await _speech_or_end(turn):
        for task in [*turn.work, *turn.stage_tasks]:
            task.cancel()
        await asyncio.gather(*turn.work, *turn.stage_tasks, return_exceptions=True)
        return None
    try:
        await supervise(recorder, turn.work, turn.stage_tasks, turn.settings.turn_timeout_s)
    except asyncio.CancelledError:
        if not turn.aborted:  # an abort cancels the turn's work; anything else cancelling us goes on up
            raise
    if not turn.aborted:
        check_complete(recorder, played=False, spoken=not turn.request.typed)
    if not recorder.timeline.ok and turn.told_start and not turn.stop_sent:
        await tell(turn.channel, turn.tell_stop())  # the device is speaking this answer: it ends here
    return recorder.finish()


async def _speech_or_end(turn: ServerTurn) -> bool:
    """Wait, with no time limit, until the VAD hears speech (True) or the turn's work ends without it.

    A stage that failed before any speech is still a failure to record (True)."""
    heard = asyncio.create_task(turn.speech.wait())
    try:
        await asyncio.wait([heard, *turn.work], return_when=asyncio.FIRST_COMPLETED)
    finally:
        heard.cancel()
    if turn.speech.is_set():
        return True
    return any(t.done() and not t.cancelled() and t.exception() is not None for t in turn.work)


async def _send(turn: ServerTurn) -> None:
    """The turn's downlink, in order: control messages, and Opus frames paced as the real server paces them."""
    loop = asyncio.get_running_loop()
    pacer = DownlinkPacer(pacing(turn.settings.pacing), time=loop.time, sleep=asyncio.sleep)
    sentence, frames = -1, 0
    while True:
        item = await turn.outbox.get()
        if isinstance(item, TurnEnd):
            if turn.told_start and not turn.stop_sent:  # a turn that told the device nothing ends with nothing
                await pacer.before_stop()  # the device plays out what it holds before it hears stop
                await turn.channel.send(turn.tell_stop())
            return
        if not isinstance(item, AudioOut):
            await turn.channel.send(item)
            continue
        if item.sentence_index != sentence:
            sentence = item.sentence_index
            text = turn.texts.get(sentence, "")
            await turn.channel.send(Tts("sentence_start", text=text, session_id=turn.request.session_id))
        await pacer.before_frame()
        packet = await encode_off_loop(turn.encoder, item.pcm, inline=turn.virtual)
        turn.recorder.sent()  # handed to the transport now: the device may have it before send_audio returns
        await turn.channel.send_audio(packet, timestamp_ms=frames * FRAME_MS)
        pacer.sent()
        frames += 1
