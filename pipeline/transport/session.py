"""The server's side of a device session, whatever the transport: hello, turns, the protocol's messages.

A session says hello, then asks for turns with ``listen``; a turn runs the same
instrumented stages as an in-process run (``serve_turn``), with the device's Opus audio
decoded into its uplink and its events told back as the protocol's messages: ``stt``,
``tts start``, ``llm``, ``sentence_start`` before each sentence's audio, paced Opus
frames, ``tts stop``. Whatever a device does wrong ends its own session only, with a close
code and reason; a turn it leaves unfinished is recorded with its error. The transport
(WebSocket, MQTT + UDP) is a ``ServerChannel``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline.clock import Clock
from pipeline.events import AudioFrame, AudioOut, Event, Sentence, TokenDelta, Transcript, TurnEnd
from pipeline.run.device import close, drain
from pipeline.run.recorder import TurnRecorder
from pipeline.run.turn import ServerStages, check_complete, serve_turn, supervise
from pipeline.tracing.timeline import PacketCounts, TurnTimeline
from pipeline.transport import protocol
from pipeline.transport.codec import CodecError, OpusDecoder, OpusEncoder
from pipeline.transport.protocol import ChannelGone, ProtocolError

_CODEC_THREADS = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="opus")

# close codes (RFC 6455; an MQTT session reports them in its goodbye)
CLOSE_PROTOCOL = 1002
CLOSE_BAD_DATA = 1007
CLOSE_POLICY = 1008


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
    max_messages_per_s: float = 100.0  # a device sends ~17 audio messages a second
    hello_timeout_s: float = 10.0
    prebuffer_frames: int = 3  # downlink: sent at once, then one frame per 60 ms
    turn_timeout_s: float = 60.0


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """What a ``listen start`` asks for; ``question_id`` and ``round`` are our emulator's extra fields."""

    session_id: str
    mode: str
    question_id: str = ""
    round: int = 0
    traceparent: str = ""  # W3C trace context of the device's turn, when the device sent one


class Turns(Protocol):
    """What the gateway needs from the lab: a turn's stages, and where a finished turn goes."""

    def stages(self, request: TurnRequest) -> ServerStages: ...

    def finished(self, request: TurnRequest, timeline: TurnTimeline) -> None: ...


class RateLimit:
    """A token bucket on the connection's messages: bursts allowed, a sustained flood is not."""

    def __init__(self, per_s: float, clock: Clock) -> None:
        self.per_s, self.clock = per_s, clock
        self.tokens = per_s  # one second's worth of burst
        self.last = clock.now_ns()

    def take(self) -> bool:
        now = self.clock.now_ns()
        self.tokens = min(self.per_s, self.tokens + (now - self.last) / 1e9 * self.per_s)
        self.last = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class ServerTurn:
    """One turn on one connection: the pipeline's server side, its uplink fed by the connection."""

    def __init__(self, channel: ServerChannel, request: TurnRequest, settings: SessionSettings, clock: Clock) -> None:
        self.channel, self.request, self.settings = channel, request, settings
        self.up: asyncio.Queue[object] = asyncio.Queue()
        self.outbox: asyncio.Queue[object] = asyncio.Queue()
        self.decoder, self.encoder = OpusDecoder(), OpusEncoder()
        self.seq = 0
        self.uplink_open = True
        self.aborted = False
        self.work: list[asyncio.Task[None]] = []
        self.texts: dict[int, str] = {}
        self.llm_told = False
        self.recorder = TurnRecorder(clock, observer=self.observe)

    # --- the pipeline's side (run.device.ServerSide) ---------------------------

    def uplink(self) -> AsyncIterator[Event]:
        return drain(self.up)

    async def send_down(self, event: Event) -> None:
        if isinstance(event, (AudioOut, TurnEnd)):
            self.outbox.put_nowait(event)

    def observe(self, role: str, event: Event) -> None:
        """Stage outputs that the device is told about, in the order the protocol tells them."""
        sid = self.request.session_id
        if role == "asr" and isinstance(event, Transcript):
            self.outbox.put_nowait({"type": "stt", "text": event.text, "session_id": sid})
            self.outbox.put_nowait({"type": "tts", "state": "start", "session_id": sid})
        elif role == "llm" and isinstance(event, TokenDelta) and event.text.strip() and not self.llm_told:
            self.llm_told = True
            self.outbox.put_nowait({"type": "llm", "text": "🙂", "emotion": "neutral", "session_id": sid})
        elif role == "sentences" and isinstance(event, Sentence):
            self.texts[event.index] = event.text

    # --- the connection's side ------------------------------------------------

    def audio(self, packet: bytes) -> None:
        """A device's Opus frame, into the uplink (dropped once the uplink is closed)."""
        if not self.uplink_open:
            return
        pcm = self.decoder.decode(packet)  # CodecError: the caller closes the connection
        self.up.put_nowait(AudioFrame(seq=self.seq, pcm=pcm))
        self.seq += 1

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


async def run_server_turn(turn: ServerTurn, stages: ServerStages) -> TurnTimeline:
    """Run the pipeline for one turn and send its messages and audio; the server's own timeline."""
    recorder = turn.recorder
    if turn.aborted:  # before it started
        return recorder.finish()
    stage_tasks: list[asyncio.Task[None]] = []
    turn.work = [
        asyncio.create_task(serve_turn(stages, recorder, turn, stage_tasks)),
        asyncio.create_task(_send(turn)),
    ]
    try:
        await supervise(recorder, turn.work, stage_tasks, turn.settings.turn_timeout_s)
    except asyncio.CancelledError:
        if not turn.aborted:  # an abort cancels the turn's work; anything else cancelling us goes on up
            raise
    if not turn.aborted:
        check_complete(recorder, played=False)
    if not recorder.timeline.ok:
        await _tell(turn, {"type": "tts", "state": "stop", "session_id": turn.request.session_id})
    return recorder.finish()


async def _tell(turn: ServerTurn, message: dict[str, Any]) -> None:
    with contextlib.suppress(ChannelGone):
        await turn.channel.send_json(message)


async def _send(turn: ServerTurn) -> None:
    """The turn's downlink, in order: control messages, and Opus frames paced like a real server."""
    loop = asyncio.get_running_loop()
    sentence, frames, start = -1, 0, 0.0
    while True:
        item = await turn.outbox.get()
        if isinstance(item, dict):
            await turn.channel.send_json(item)
        elif isinstance(item, TurnEnd):
            await turn.channel.send_json({"type": "tts", "state": "stop", "session_id": turn.request.session_id})
            return
        elif isinstance(item, AudioOut):
            if item.sentence_index != sentence:
                sentence = item.sentence_index
                text = turn.texts.get(sentence, "")
                sid = turn.request.session_id
                await turn.channel.send_json(
                    {"type": "tts", "state": "sentence_start", "text": text, "session_id": sid}
                )
            if frames >= turn.settings.prebuffer_frames:
                due = start + (frames - turn.settings.prebuffer_frames + 1) * protocol.FRAME_MS / 1000
                await asyncio.sleep(max(0.0, due - loop.time()))
            elif frames == 0:
                start = loop.time()
            # libopus runs without the GIL: encoding beside the loop keeps other devices' uplink on time
            packet = await loop.run_in_executor(_CODEC_THREADS, turn.encoder.encode, item.pcm)
            turn.recorder.sent()  # handed to the transport now: the device may have it before send_audio returns
            await turn.channel.send_audio(packet, timestamp_ms=frames * protocol.FRAME_MS)
            frames += 1


class DeviceSession:
    """One connection: hello, then turns one at a time, until the device leaves or breaks the protocol."""

    def __init__(self, channel: ServerChannel, settings: SessionSettings, turns: Turns, clock: Clock) -> None:
        self.channel, self.settings, self.turns, self.clock = channel, settings, turns, clock
        self.session_id = uuid.uuid4().hex
        self.turn: ServerTurn | None = None
        self.task: asyncio.Task[None] | None = None
        self.rate = RateLimit(settings.max_messages_per_s, clock)
        self.ignored: dict[str, int] = {}  # message types we do not act on, counted

    async def serve(self) -> None:
        messages = aiter(self.channel.incoming())  # one reader of the channel, hello included
        try:
            await self._hello(messages)
            async for message in messages:
                if not self.rate.take():
                    raise _Close(CLOSE_POLICY, f"more than {self.settings.max_messages_per_s:g} messages a second")
                await self._message(message)
        except _Close as exc:
            await self._leave("disconnected", f"the server closed the connection: {exc.reason}")
            await self.channel.close(exc.code, exc.reason[:120])
        except ProtocolError as exc:
            await self._leave("protocol_error", str(exc))
            await self.channel.close(CLOSE_PROTOCOL, str(exc)[:120])
        except CodecError as exc:
            await self._leave("bad_audio", str(exc))
            await self.channel.close(CLOSE_BAD_DATA, str(exc)[:120])
        except ChannelGone:
            pass
        finally:
            await self._leave("disconnected", "the device left mid-turn")

    async def _hello(self, messages: AsyncIterator[str | protocol.Packet]) -> None:
        try:
            async with asyncio.timeout(self.settings.hello_timeout_s):
                first = await anext(messages, None)
        except TimeoutError:
            raise _Close(CLOSE_POLICY, f"no hello within {self.settings.hello_timeout_s:g} s") from None
        if first is None:
            raise ChannelGone("the device left before hello")
        if not isinstance(first, str):
            raise ProtocolError("binary audio before hello")
        message = protocol.parse(first)
        if message["type"] != "hello":
            raise ProtocolError(f"the first message must be hello, not {message['type']!r}")
        if message.get("transport", self.channel.transport) != self.channel.transport:
            raise ProtocolError(f"transport {message.get('transport')!r} over {self.channel.transport}")
        protocol.check_audio_params(message)
        answer = protocol.hello(self.channel.transport, self.session_id, **self.channel.hello_extra(self.session_id))
        await self.channel.send_json(answer)

    async def _message(self, message: str | protocol.Packet) -> None:
        if isinstance(message, protocol.Packet):
            packet = message
            if packet.kind == protocol.TYPE_JSON:
                await self._control(protocol.parse(packet.payload))
            elif self.turn is not None:
                try:
                    self.turn.audio(packet.payload)
                except CodecError:
                    if self.channel.packet_counts() is None:  # reliable: the device sent it so
                        raise
                    self.ignored["undecodable packet"] = self.ignored.get("undecodable packet", 0) + 1
            else:
                self.ignored["audio outside a turn"] = self.ignored.get("audio outside a turn", 0) + 1
            return
        await self._control(protocol.parse(message))

    async def _control(self, message: dict[str, Any]) -> None:
        kind, state = message["type"], message.get("state")
        if kind == "listen" and state == "start":
            await self._start(message)
        elif kind == "listen" and state == "stop" and self.turn is not None:
            self.turn.close_uplink()
        elif kind == "abort" and self.turn is not None:
            self.turn.abort("aborted", f"the device aborted the turn ({message.get('reason', 'no reason given')})")
        elif kind == "goodbye":
            raise _Close(1000, "goodbye")
        else:  # listen detect, mcp, iot, and whatever firmware adds: tolerated, counted
            key = f"{kind}:{state}" if state else str(kind)
            self.ignored[key] = self.ignored.get(key, 0) + 1

    async def _start(self, message: dict[str, Any]) -> None:
        mode = message.get("mode", "auto")
        if mode not in protocol.LISTEN_MODES:
            raise ProtocolError(f"listen mode {mode!r} is not one of {', '.join(protocol.LISTEN_MODES)}")
        if self.turn is not None:  # speaking over the answer: the answer is abandoned
            self.turn.abort("interrupted", "the device started a new turn mid-answer")
            await self._wait_turn()
        lab = message["lab"] if isinstance(message.get("lab"), dict) else {}
        traceparent = message.get("traceparent")
        request = TurnRequest(
            self.session_id,
            mode,
            str(lab.get("question_id", "")),
            _int(lab.get("round")),
            traceparent if isinstance(traceparent, str) else "",
        )
        try:
            stages = self.turns.stages(request)
        except Exception as exc:  # a turn that cannot be built is refused, not the connection
            await self.channel.send_json({"type": "error", "message": f"turn not started: {exc}"})
            return
        self.channel.turn_started()
        self.turn = turn = ServerTurn(self.channel, request, self.settings, self.clock)
        self.task = asyncio.create_task(self._run(turn, stages))

    async def _run(self, turn: ServerTurn, stages: ServerStages) -> None:
        timeline = await run_server_turn(turn, stages)
        timeline.packets = self.channel.packet_counts()
        if self.turn is turn:
            self.turn = None
        self.turns.finished(turn.request, timeline)

    async def _wait_turn(self) -> None:
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None

    async def _leave(self, error_type: str, message: str) -> None:
        if self.turn is not None:
            self.turn.abort(error_type, message)
        await self._wait_turn()


class _Close(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
