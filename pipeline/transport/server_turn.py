"""One turn on a device connection: the pipeline's server side, fed by the connection, told back as messages.

A turn runs the same instrumented stages as an in-process run (``serve_turn``); its stage
outputs become the protocol's messages (``stt``, ``tts start``, ``llm``, ``sentence_start``
before each sentence's audio, paced Opus frames, ``tts stop``). The session decides when a
turn starts and what stops it; the turn tells the session when it heard speech, end-pointed
and recognised an utterance, because continuous listening and barge-in hang on those moments.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipeline.clock import Clock
from pipeline.events import AudioOut, Event, Sentence, SpeechEnd, SpeechStart, TokenDelta, Transcript, TurnEnd
from pipeline.run.device import close, drain
from pipeline.run.recorder import TurnRecorder
from pipeline.run.turn import ServerStages, check_complete, serve_turn, supervise
from pipeline.tracing.timeline import PacketCounts, TurnTimeline
from pipeline.transport import protocol
from pipeline.transport.codec import OpusEncoder
from pipeline.transport.pacing import DownlinkPacer, pacing
from pipeline.transport.protocol import ChannelGone
from pipeline.transport.uplink import Reframer

_CODEC_THREADS = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="opus")

# How a turn began: a listen start, speech heard while the session listens on, typed text
# (listen detect), or a wake word the server answers with a greeting.
STARTED_BY = ("listen", "speech", "text", "wake")


class ServerChannel(Protocol):
    """One device's link to the server, as a session uses it."""

    transport: str  # what the hello says: "websocket", "udp"

    def incoming(self) -> AsyncIterator[str | protocol.Packet]: ...

    async def send_json(self, message: dict[str, Any]) -> None: ...

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None: ...

    async def close(self, code: int, reason: str) -> None: ...

    def hello_extra(self, session_id: str) -> dict[str, Any]: ...

    def turn_started(self) -> None:
        """A turn begins: a lossy channel starts counting its packets afresh."""

    def packet_counts(self) -> PacketCounts | None:
        """The turn's incoming packets, for a lossy channel (UDP); None for a reliable one."""


@dataclass(frozen=True, slots=True)
class SessionSettings:
    max_messages_per_s: float = 100.0  # a device sends ~17 audio messages a second at 60 ms, ~50 at 20 ms
    hello_timeout_s: float = 10.0
    turn_timeout_s: float = 60.0
    pacing: str = "xiaozhi-server"  # downlink pacing (pacing.PACINGS); "lab-v1" is the lab's pacing before it
    downlink_codec: str = (
        "xiaozhi-server"  # the server's Opus encoder preset (codec.PRESETS): 24 kHz, as the real server
    )
    # xiaozhi-esp32-server's config.yaml: wakeup_words, enable_greeting, and the text it chats with on a wake word
    wake_words: tuple[str, ...] = ("你好小智", "嘿你好呀", "你好小志", "小爱同学", "你好小鑫", "你好小新", "小美同学")
    greeting: str = "嘿，你好呀"  # "" = enable_greeting false: a wake word is acknowledged, not answered
    wake_mute_s: float = 2.0  # the real server ignores audio this long after a detect (receiveAudioHandle.py)


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """What started a turn; ``question_id`` and ``round`` are our emulator's extra fields."""

    session_id: str
    mode: str
    question_id: str = ""
    round: int = 0
    traceparent: str = ""  # W3C trace context of the device's turn, when the device sent one
    started_by: str = "listen"  # one of STARTED_BY
    text: str = ""  # a text or wake turn's input
    device: Any = field(default=None, compare=False, repr=False)  # the session's DeviceMcp, when the device has one

    @property
    def typed(self) -> bool:
        """A turn with no audio: its input is text (``listen detect``, or a wake word's greeting)."""
        return self.started_by in ("text", "wake")


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
    ) -> None:
        self.channel, self.request, self.settings, self.watcher = channel, request, settings, watcher
        self.up: asyncio.Queue[object] = asyncio.Queue()
        self.outbox: asyncio.Queue[object] = asyncio.Queue()
        self.reframer = Reframer()
        self.encoder = OpusEncoder(preset=settings.downlink_codec)
        self.uplink_open = True
        self.aborted = False
        self.work: list[asyncio.Task[None]] = []
        self.stage_tasks: list[asyncio.Task[None]] = []
        self.texts: dict[int, str] = {}
        self.llm_told = False
        self.told_start = False  # the device was told ``tts start``: it is speaking this turn's answer
        # ``tts stop`` for this turn's answer has gone out: the abort handler sent it, or a newer turn's answer
        # took the device's speaker; either way this turn tells the device nothing more
        self.stop_sent = False
        # a turn started by speech heard while listening on is only a turn once the VAD hears speech
        self.candidate = request.started_by == "speech" or (
            request.started_by == "listen" and request.mode == "realtime"
        )
        self.speech = asyncio.Event()
        self.recorder = TurnRecorder(clock, observer=self.observe)

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
            self.watcher.recognised(self)
            self.outbox.put_nowait({"type": "stt", "text": event.text, "session_id": sid})
            self.outbox.put_nowait({"type": "tts", "state": "start", "session_id": sid})
            self.told_start = True
        elif role == "llm" and isinstance(event, TokenDelta) and event.text.strip() and not self.llm_told:
            self.llm_told = True
            # the real server's default emotion (textUtils.py) when the text names none
            self.outbox.put_nowait({"type": "llm", "text": "🙂", "emotion": "happy", "session_id": sid})
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
            close(self.up)

    def abort(self, error_type: str, message: str) -> None:
        """Fail the turn with this reason and stop its work (the first failure recorded stays)."""
        self.recorder.fail(error_type, message)
        self.close_uplink()
        self.aborted = True
        for task in self.work:
            task.cancel()

    def tell_stop(self) -> dict[str, Any]:
        """The ``tts stop`` that ends this turn's answer on the device; it is not to be sent twice."""
        self.stop_sent = True
        return {"type": "tts", "state": "stop", "session_id": self.request.session_id}


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
    if not recorder.timeline.ok and not turn.stop_sent:
        # the firmware ignores a stop while it is not speaking; our emulator learns from it that the turn failed
        await tell(turn.channel, turn.tell_stop())
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


async def tell(channel: ServerChannel, message: dict[str, Any]) -> None:
    """Send a message the device may no longer be there to hear: a channel gone is no error here."""
    with contextlib.suppress(ChannelGone):
        await channel.send_json(message)


async def _send(turn: ServerTurn) -> None:
    """The turn's downlink, in order: control messages, and Opus frames paced as the real server paces them."""
    loop = asyncio.get_running_loop()
    pacer = DownlinkPacer(pacing(turn.settings.pacing), time=loop.time, sleep=asyncio.sleep)
    sentence, frames = -1, 0
    while True:
        item = await turn.outbox.get()
        if isinstance(item, dict):
            await turn.channel.send_json(item)
        elif isinstance(item, TurnEnd):
            await pacer.before_stop()  # the device plays out what it holds before it hears stop
            await turn.channel.send_json(turn.tell_stop())
            return
        elif isinstance(item, AudioOut):
            if item.sentence_index != sentence:
                sentence = item.sentence_index
                text = turn.texts.get(sentence, "")
                sid = turn.request.session_id
                await turn.channel.send_json(
                    {"type": "tts", "state": "sentence_start", "text": text, "session_id": sid}
                )
            await pacer.before_frame()
            # libopus runs without the GIL: encoding beside the loop keeps other devices' uplink on time
            packet = await loop.run_in_executor(_CODEC_THREADS, turn.encoder.encode, item.pcm)
            turn.recorder.sent()  # handed to the transport now: the device may have it before send_audio returns
            await turn.channel.send_audio(packet, timestamp_ms=frames * protocol.FRAME_MS)
            pacer.sent()
            frames += 1
