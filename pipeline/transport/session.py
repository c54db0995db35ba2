"""The server's side of a device session, whatever the transport: hello, listening, turns, MCP.

The session follows xiaozhi-esp32-server, whose rules a real device relies on:

- ``listen start`` starts listening (auto and manual mode: a turn for the utterance that
  follows; realtime mode: listening that goes on); it never waits for an old answer to end,
  and never stops one (``listenMessageHandler.py``).
- While the session listens on (realtime mode, and auto mode after a failed or empty turn)
  the VAD runs on all incoming audio and speech starts the next turn by itself; an utterance
  recognised while an answer plays stops that answer (``receiveAudioHandle.py`` startToChat).
- ``abort`` is answered with ``tts stop`` at once (``abortHandle.py``).
- ``listen detect`` carries text: a typed question, or a wake word answered with a greeting.
- A packet that does not decode and text that is not JSON are dropped and counted; a repeated
  hello starts a new session on the same connection.

Whatever a device does wrong ends its own session only, with a close code and reason; a turn
it leaves unfinished is recorded with its error. The transport is a ``ServerChannel``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Protocol

from pipeline.clock import Clock
from pipeline.run.inputs import push_to_talk, typed
from pipeline.run.turn import ServerStages
from pipeline.tracing.timeline import TurnTimeline
from pipeline.transport import protocol
from pipeline.transport.codec import CodecError, OpusDecoder
from pipeline.transport.mcp import DeviceMcp
from pipeline.transport.protocol import ChannelGone, ProtocolError
from pipeline.transport.server_turn import (
    ServerChannel,
    ServerTurn,
    SessionSettings,
    TurnRequest,
    run_server_turn,
    tell,
)

__all__ = ["DeviceSession", "ServerChannel", "SessionSettings", "TurnRequest", "Turns"]

# close codes (RFC 6455; an MQTT session reports them in its goodbye)
CLOSE_PROTOCOL = 1002
CLOSE_POLICY = 1008


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


class DeviceSession:
    """One connection: hello, then listening and turns, until the device leaves or breaks the protocol."""

    def __init__(self, channel: ServerChannel, settings: SessionSettings, turns: Turns, clock: Clock) -> None:
        self.channel, self.settings, self.turns, self.clock = channel, settings, turns, clock
        self.session_id = str(uuid.uuid4())  # dashed, as the real server's (connection.py)
        self.decoder = OpusDecoder()  # one per connection, as the real server's: 20, 40 and 60 ms packets
        self.collecting: ServerTurn | None = None  # the turn the device's audio goes to
        self.running: dict[ServerTurn, asyncio.Task[None]] = {}
        self.mode = "auto"
        self.listening = False  # listening on: speech starts a turn with no listen start
        self.label: dict[str, Any] = {}  # our emulator's name for the next question (a "lab" message)
        self.mcp: DeviceMcp | None = None
        self.muted_until_ns = 0
        self.rate = RateLimit(settings.max_messages_per_s, clock)
        self.ignored: dict[str, int] = {}  # what we do not act on, counted
        self.tasks: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        messages = aiter(self.channel.incoming())  # one reader of the channel, hello included
        try:
            await self._first_hello(messages)
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
        except ChannelGone:
            pass
        finally:
            await self._leave("disconnected", "the device left mid-turn")

    # --- hello ---------------------------------------------------------------

    async def _first_hello(self, messages: AsyncIterator[str | protocol.Packet]) -> None:
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
        await self._hello(message)

    async def _hello(self, message: dict[str, Any]) -> None:
        if message.get("transport", self.channel.transport) != self.channel.transport:
            raise ProtocolError(f"transport {message.get('transport')!r} over {self.channel.transport}")
        params = protocol.check_audio_params(message)
        extra = self.channel.hello_extra(self.session_id)
        await self.channel.send_json(
            protocol.hello(self.channel.transport, self.session_id, audio_params=params, **extra)
        )
        features = message.get("features")
        if isinstance(features, dict) and features.get("mcp"):
            self.mcp = DeviceMcp(self.channel.send_json, self.session_id)
            self._soon(self.mcp.start())  # its replies come through this session's reader, which must go on

    async def _hello_again(self, message: dict[str, Any]) -> None:
        """A device whose channel lapsed says hello anew: the old session ends, a new one begins."""
        await self._leave("disconnected", "the device opened a new session")
        self.session_id = str(uuid.uuid4())
        self.decoder = OpusDecoder()
        self.mode, self.listening, self.label = "auto", False, {}
        await self._hello(message)

    # --- messages ------------------------------------------------------------

    async def _message(self, message: str | protocol.Packet) -> None:
        if isinstance(message, protocol.Packet) and message.kind == protocol.TYPE_OPUS:
            self._audio(message.payload)
            return
        text = message.payload if isinstance(message, protocol.Packet) else message
        try:
            control = protocol.parse(text)
        except ProtocolError:  # the real server echoes it and carries on (textMessageProcessor.py)
            self._count("text that is not a JSON message")
            return
        await self._control(control)

    async def _control(self, message: dict[str, Any]) -> None:
        kind, state = message["type"], message.get("state")
        if kind == "hello":
            await self._hello_again(message)
        elif kind == "listen":
            await self._listen(message, state)
        elif kind == "abort":
            await self._abort(message)
        elif kind == "lab" and state == "question":
            self._label(message)
        elif kind == "mcp" and self.mcp is not None:
            self.mcp.handle(message)
        elif kind == "goodbye":
            raise _Close(1000, "goodbye")
        else:  # iot, ping, and whatever firmware adds: tolerated, counted
            self._count(f"{kind}:{state}" if state else str(kind))

    async def _listen(self, message: dict[str, Any], state: object) -> None:
        if "mode" in message:  # the real server keeps the mode a listen message last named
            mode = message["mode"]
            if mode not in protocol.LISTEN_MODES:
                raise ProtocolError(f"listen mode {mode!r} is not one of {', '.join(protocol.LISTEN_MODES)}")
            self.mode = mode
        if state == "start":
            self._reset_audio("a new listen start reset the audio")
            self.listening = self.mode == "realtime"
            self._begin(self._request("listen", message))
        elif state == "stop":
            if self.collecting is not None:  # manual mode: the utterance ends here
                self.collecting.close_uplink()
                self.collecting = None
            self.listening = False
        elif state == "detect":
            await self._detect(message)
        else:
            self._count(f"listen:{state}")

    async def _detect(self, message: dict[str, Any]) -> None:
        """Typed text or a wake word: a turn with no audio, as the real server's detect handler."""
        text = message.get("text")
        if not isinstance(text, str) or not text.strip():
            self._count("listen:detect without text")
            return
        self._reset_audio("the device sent a detect")
        self.muted_until_ns = self.clock.now_ns() + int(self.settings.wake_mute_s * 1e9)
        if _bare(text) in {_bare(w) for w in self.settings.wake_words}:
            if not self.settings.greeting:  # enable_greeting false: acknowledged, not answered
                await self.channel.send_json({"type": "stt", "text": text, "session_id": self.session_id})
                await self.channel.send_json({"type": "tts", "state": "stop", "session_id": self.session_id})
                return
            self._begin(self._request("wake", message, self.settings.greeting))
        else:
            self._begin(self._request("text", message, text))

    async def _abort(self, message: dict[str, Any]) -> None:
        reason = message.get("reason") or "no reason given"
        await self.channel.send_json({"type": "tts", "state": "stop", "session_id": self.session_id})
        for turn in list(self.running):
            if not turn.unheard:  # a listener that heard nothing goes on listening
                turn.stop_sent = True
                turn.abort("aborted", f"the device aborted the turn ({reason})")

    def _label(self, message: dict[str, Any]) -> None:
        """Our emulator names the question it is about to ask; a listener that heard nothing yet restarts with it."""
        self.label = message
        turn = self.collecting
        if turn is not None and turn.unheard:
            self._discard(turn)

    def _audio(self, packet: bytes) -> None:
        now = self.clock.now_ns()
        if now < self.muted_until_ns:
            self._count("audio while the server ignores it after a detect")
            return
        try:
            pcm = self.decoder.decode(packet)
        except CodecError:
            self._count("undecodable packet")
            return
        turn = self.collecting
        if turn is None or not turn.uplink_open:
            turn = self._begin(self._request("speech")) if self.listening else None
            if turn is None:
                self._count("audio outside a turn")
                return
        turn.audio(pcm, now)

    # --- turns ---------------------------------------------------------------

    def _request(self, started_by: str, message: dict[str, Any] | None = None, text: str = "") -> TurnRequest:
        """The turn's request, named by the listen message's lab fields, else by the last lab message."""
        message = message or {}
        lab = message.get("lab")
        if isinstance(lab, dict):
            source = lab
        else:
            source, self.label = self.label, {}
        traceparent = message.get("traceparent") or source.get("traceparent") or ""
        return TurnRequest(
            self.session_id,
            self.mode,
            str(source.get("question_id", "")),
            _int(source.get("round")),
            traceparent if isinstance(traceparent, str) else "",
            started_by,
            text,
            self.mcp,
        )

    def _begin(self, request: TurnRequest) -> ServerTurn | None:
        try:
            stages = self.turns.stages(request)
        except Exception as exc:  # a turn that cannot be built is refused, not the connection
            self.listening = False  # and not built again for every frame that follows
            self._soon(tell(self.channel, {"type": "error", "message": f"turn not started: {exc}"}))
            return None
        if request.typed:
            stages = typed(stages, request.text)
        elif request.mode == "manual":
            stages = push_to_talk(stages)
        turn = ServerTurn(self.channel, request, self.settings, self.clock, self)
        if request.typed:
            turn.close_uplink()
            turn.speech.set()
        else:
            self.channel.turn_started()
            self.collecting = turn
        self.running[turn] = asyncio.create_task(self._run(turn, stages))
        return turn

    async def _run(self, turn: ServerTurn, stages: ServerStages) -> None:
        timeline = await run_server_turn(turn, stages)
        del self.running[turn]
        if self.collecting is turn:
            self.collecting = None
        if timeline is None:  # listened, heard nothing: no turn
            return
        timeline.packets = self.channel.packet_counts()
        timeline.dropped, self.ignored = self.ignored, {}
        self.turns.finished(turn.request, timeline)
        if not timeline.ok and self.mode == "auto":  # the device still streams: the next utterance is heard
            self.listening = True

    def _reset_audio(self, why: str) -> None:
        """What the device said so far is forgotten (the real server's reset_audio_states)."""
        turn, self.collecting = self.collecting, None
        if turn is None:
            return
        if turn.unheard:
            self._discard(turn)
        elif turn.uplink_open:
            turn.abort("interrupted", why)

    def _discard(self, turn: ServerTurn) -> None:
        """A listener that heard nothing is dropped: its work ends, and no turn is recorded."""
        turn.close_uplink()
        if self.collecting is turn:
            self.collecting = None

    # --- what turns tell the session (server_turn.TurnWatcher) ---------------

    def endpointed(self, turn: ServerTurn) -> None:
        """Listening on: the audio after this end-point belongs to the next utterance."""
        if self.listening and self.collecting is turn:
            turn.close_uplink()
            self.collecting = None

    def recognised(self, turn: ServerTurn) -> None:
        """A new utterance stops the answer the device is playing (not in manual mode, as the real server)."""
        if self.mode == "manual":
            return
        for other in list(self.running):
            if other is turn or not other.told_start or other.stop_sent:
                continue
            turn.outbox.put_nowait(other.tell_stop())  # before this turn's stt: the device leaves the old answer
            other.abort("interrupted", "a new utterance was recognised mid-answer")

    # --- leaving -------------------------------------------------------------

    async def _leave(self, error_type: str, message: str) -> None:
        for turn in list(self.running):
            if turn.unheard:
                self._discard(turn)
            else:
                turn.abort(error_type, message)
        self.collecting = None
        if self.running:
            await asyncio.gather(*self.running.values(), return_exceptions=True)
        if self.mcp is not None:
            self.mcp.close()
            self.mcp = None

    def _soon(self, work: Coroutine[Any, Any, None]) -> None:
        """Work the message loop must not wait for; a device gone meanwhile is no error of ours."""
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        exc = None if task.cancelled() else task.exception()
        if exc is not None and not isinstance(exc, ChannelGone):
            task.get_loop().call_exception_handler({"message": "device session work failed", "exception": exc})

    def _count(self, what: str) -> None:
        self.ignored[what] = self.ignored.get(what, 0) + 1


class _Close(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


def _bare(text: str) -> str:
    """Text without punctuation or spaces, as the real server compares wake words."""
    return "".join(ch for ch in text if ch.isalnum())


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
