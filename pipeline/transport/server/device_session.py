"""The server's side of a device session, whatever the transport: hello, listening, turns, MCP.

The session follows xiaozhi-esp32-server, whose rules a real device relies on (the named
exceptions are ``SessionSettings`` fields):

- ``listen start`` starts listening; it never waits for an old answer to end and never stops one
  (``listenMessageHandler.py``). In auto and realtime mode the VAD hears every frame for the
  whole session (``receiveAudioHandle.py``), so speech after an end-point is a new utterance;
  an utterance recognised while an answer is on its way stops that answer first.
- ``abort`` is answered with ``tts stop`` at once (``abortHandle.py``).
- ``listen detect`` carries text: a typed question, or a wake word answered with the cached
  reply, no ``stt`` and no LLM, the session reading nothing else until it has played
  (``helloHandle.py`` checkWakeupWords). Audio is ignored for 2 s from the first frame after.
- A repeated hello is answered again, same session, nothing stopped (``helloHandle.py``);
  ``goodbye`` over WebSocket is a type the real server does not know. No voice for two minutes
  while audio comes, and the LLM says goodbye before the connection closes; no audio at all for
  three, and it closes (``idle``).

Everything that arrives was decoded at the edge (``wire.inbound``): what could not be read is
counted, never raised. Whatever a device does wrong ends its own session only, with a close
code and reason; a turn it leaves unfinished is recorded with its error.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

from pipeline.clock import Clock
from pipeline.events import FRAME_BYTES, FRAME_MS
from pipeline.run.inputs import push_to_talk, typed
from pipeline.run.turn import ServerStages
from pipeline.transport.server.channel import Background, ServerChannel, tell
from pipeline.transport.server.device_tools import DeviceToolsClient
from pipeline.transport.server.flood import Flooded
from pipeline.transport.server.idle import IdleWatch
from pipeline.transport.server.ignored import Ignored, kind_of, malformed_kind
from pipeline.transport.server.requests import MOST_ID_CHARS, TurnRequest, TurnSources, bounded
from pipeline.transport.server.server_settings import SessionSettings
from pipeline.transport.server.server_turn import ServerTurn, run_server_turn
from pipeline.transport.server.texts import stt_text, wake_text
from pipeline.transport.server.wake import play_cached_reply
from pipeline.transport.wire.failures import ChannelGone, ProtocolError
from pipeline.transport.wire.framing import Audio
from pipeline.transport.wire.inbound import Inbound
from pipeline.transport.wire.messages import (
    LISTEN_MODES,
    Abort,
    Hello,
    Lab,
    Listen,
    Malformed,
    Mcp,
    ServerError,
    Stt,
    Tts,
    check_audio_params,
)
from pipeline.transport.wire.opus import CodecError, OpusDecoder

# close codes (RFC 6455; an MQTT session reports them in its goodbye)
CLOSE_NORMAL = 1000
CLOSE_PROTOCOL = 1002
CLOSE_POLICY = 1008


class _Close(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


class DeviceSession:
    """One connection: hello, then listening and turns, until the device leaves, breaks the protocol or idles."""

    def __init__(self, channel: ServerChannel, settings: SessionSettings, turns: TurnSources, clock: Clock) -> None:
        self.channel, self.settings, self.turns, self.clock = channel, settings, turns, clock
        self.session_id = str(uuid.uuid4())  # dashed, as the real server's (connection.py)
        self.decoder = OpusDecoder()  # one per connection, as the real server's: 20, 40 and 60 ms packets
        self.packet_ms = 60  # what the hello announced
        self.collecting: ServerTurn | None = None  # the turn the device's audio goes to
        self.running: dict[ServerTurn, asyncio.Task[None]] = {}
        self.mode = "auto"
        self.listening = settings.auto_listening == "continuous"  # speech starts a turn with no listen start
        self.label: Lab | None = None  # our emulator's name for the next question
        self.mcp: DeviceToolsClient | None = None
        self.mute_pending = False  # a wake or typed text: the next frame starts the mute
        self.muted_until_ns = 0
        self.idle = IdleWatch(settings, clock)
        self.goodbye: ServerTurn | None = None  # the idle goodbye: the connection closes after it
        self.ignored = Ignored()  # what we do not act on, counted by kind
        self.tasks = Background()

    async def serve(self) -> None:
        messages = aiter(self.channel.incoming())  # one reader of the channel, hello included
        watch = asyncio.create_task(self._watch_idle())
        try:
            await self._first_hello(messages)
            async for item in messages:
                await self._item(item)
        except _Close as exc:
            await self._leave("disconnected", f"the server closed the connection: {exc.reason}")
            await self.channel.close(exc.code, exc.reason[:120])
        except Flooded as exc:
            await self._leave("disconnected", f"the server closed the connection: {exc}")
            await self.channel.close(CLOSE_POLICY, str(exc)[:120])
        except ProtocolError as exc:
            await self._leave("protocol_error", str(exc))
            await self.channel.close(CLOSE_PROTOCOL, str(exc)[:120])
        except ChannelGone:
            pass
        finally:
            watch.cancel()
            await self._leave("disconnected", "the device left mid-turn")
            self.turns.ended(self.session_id)

    # --- hello ---------------------------------------------------------------

    async def _first_hello(self, messages: AsyncIterator[Inbound]) -> None:
        try:
            async with asyncio.timeout(self.settings.hello_timeout_s):
                first = await anext(messages, None)
        except TimeoutError:
            raise _Close(CLOSE_POLICY, f"no hello within {self.settings.hello_timeout_s:g} s") from None
        if first is None:
            raise ChannelGone("the device left before hello")
        if isinstance(first, Audio):
            raise ProtocolError("binary audio before hello")
        if isinstance(first, Malformed):
            raise ProtocolError(f"the first message is unreadable: {first.reason}")
        if not isinstance(first, Hello):
            raise ProtocolError(f"the first message must be hello, not {kind_of(first)!r}")
        await self._hello(first)

    async def _hello(self, hello: Hello) -> None:
        """Answer a hello; a repeated one is answered alike, same session, nothing stopped (helloHandle.py),
        and a device that serves MCP has its tools asked for again."""
        if hello.transport != self.channel.transport:
            raise ProtocolError(f"transport {hello.transport!r} over {self.channel.transport}")
        params = check_audio_params(hello)
        self.packet_ms = params.frame_duration
        answer = Hello(transport=self.channel.transport, audio_params=params, session_id=self.session_id)
        await self.channel.send(self.channel.answer_hello(answer))
        if hello.features is not None and hello.features.mcp:
            if self.mcp is not None:
                self.mcp.close()
            self.mcp = DeviceToolsClient(self.channel.send, self.session_id)
            self.tasks.soon(self.mcp.start())  # its replies come through this session's reader, which must go on

    # --- what arrives ----------------------------------------------------------

    async def _item(self, item: Inbound) -> None:
        if isinstance(item, Audio):
            self._audio(item.opus)
            return
        self.channel.guard.control()
        if isinstance(item, Malformed):  # the real server echoes bad JSON and carries on (textMessageProcessor.py)
            self._count(malformed_kind(item.what))
        elif isinstance(item, Hello):
            await self._hello(item)
        elif isinstance(item, Listen):
            await self._listen(item)
        elif isinstance(item, Abort):
            await self._abort(item)
        elif isinstance(item, Lab) and item.state == "question":
            self._label(item)
        elif isinstance(item, Mcp) and self.mcp is not None:
            self.mcp.handle(item)
        else:  # iot, ping, goodbye over WebSocket and whatever firmware adds: tolerated, counted
            self._count(kind_of(item))

    async def _listen(self, message: Listen) -> None:
        if message.mode is not None:  # the real server keeps the mode a listen message last named
            if message.mode in LISTEN_MODES:
                self.mode = message.mode
            else:  # the real server keeps any string, and acts as in auto mode on all but "manual"
                self._count("listen mode unknown, taken as auto")
                self.mode = "auto"
        if message.state == "start":
            self._reset_audio("a new listen start reset the audio")
            self.listening = self._listens_on()
            self._begin(self._request("listen", message))
        elif message.state == "stop":
            if self.collecting is not None:  # manual mode: the utterance ends here
                self.collecting.close_uplink()
                self.collecting = None
            self.listening = self._listens_on()
        elif message.state == "detect":
            await self._detect(message)
        else:
            self._count(kind_of(message))

    def _listens_on(self) -> bool:
        """Whether speech starts a turn by itself: always in realtime mode, and in auto mode as the real server."""
        return self.mode == "realtime" or (self.mode == "auto" and self.settings.auto_listening == "continuous")

    async def _detect(self, message: Listen) -> None:
        """Typed text or a wake word: answered with no audio heard (listenMessageHandler.py detect)."""
        text = message.text
        self._reset_audio("the device sent a detect")
        if text is None or not text.strip():
            self._count("listen:detect without text")
            return
        self.idle.active()
        if wake_text(text) not in self.settings.wake_words:
            self.mute_pending = True
            self._begin(self._request("text", message, text))
        elif not self.settings.greeting:  # enable_greeting false: acknowledged, not answered
            await self.channel.send(Stt(text=stt_text(text), session_id=self.session_id))
            await self.channel.send(Tts("start", session_id=self.session_id))
            await self.channel.send(Tts("stop", session_id=self.session_id))
        elif self.settings.wake_reply_cache:
            self.mute_pending = True
            await self._stop_answers("a wake word was detected")
            virtual = self.clock.kind == "virtual"
            await play_cached_reply(self.channel, self.turns, self.settings, self.session_id, virtual)
            self.idle.active()
        else:
            self.mute_pending = True
            self._begin(self._request("wake", message, self.settings.wake_chat_text))

    async def _abort(self, message: Abort) -> None:
        reason = bounded(message.reason, MOST_ID_CHARS) if message.reason else "no reason given"
        await self.channel.send(Tts("stop", session_id=self.session_id))
        self.goodbye = None  # an aborted goodbye closes nothing (abortHandle.py: close_after_chat = False)
        for turn in list(self.running):
            if not turn.unheard:  # a listener that heard nothing goes on listening
                turn.stop_sent = True
                turn.abort("aborted", f"the device aborted the turn ({reason})")

    def _label(self, message: Lab) -> None:
        """Our emulator names the question it is about to ask; a listener that heard nothing yet restarts with it."""
        self.label = message
        turn = self.collecting
        if turn is not None and turn.unheard:
            self._discard(turn)

    def _audio(self, packet: bytes) -> None:
        now = self.clock.now_ns()
        if self.mute_pending:
            self.mute_pending, self.muted_until_ns = False, now + int(self.settings.wake_mute_s * 1e9)
        try:
            pcm = self.decoder.decode(packet)
        except CodecError:
            self.channel.guard.audio(self.packet_ms)
            self._count("undecodable packet")
            return
        self.channel.guard.audio(len(pcm) * FRAME_MS / FRAME_BYTES)
        if now < self.muted_until_ns:
            self._count("audio in the mute after a wake word or typed text")
            return
        turn = self.collecting
        if turn is None or not turn.uplink_open:
            turn = self._begin(self._request("speech")) if self.listening else None
            if turn is None:
                self._count("audio outside a turn")
                return
        turn.audio(pcm, now)
        if self.goodbye is None and self.idle.goodbye_due(self._busy()):
            self._say_goodbye()

    # --- turns ---------------------------------------------------------------

    def _request(self, started_by: str, message: Listen | None = None, text: str = "") -> TurnRequest:
        """The turn's request, named by the listen message's lab fields, else by the last lab message (used up)."""
        tag = message.lab if message is not None else None
        question_id, round_no, traceparent = "", 0, message.traceparent if message is not None else None
        if tag is not None:
            question_id, round_no = tag.question_id, tag.round
        elif self.label is not None:
            label, self.label = self.label, None
            question_id, round_no, traceparent = label.question_id, label.round, traceparent or label.traceparent
        return TurnRequest(
            self.session_id, self.mode, question_id, round_no, traceparent or "", started_by, text, self.mcp
        )

    def _begin(self, request: TurnRequest) -> ServerTurn | None:
        try:
            stages = self.turns.stages(request)
        except Exception as exc:  # a turn that cannot be built is refused, not the connection
            self.listening = False  # and not built again for every frame that follows
            self.tasks.soon(tell(self.channel, ServerError(message=f"turn not started: {exc}")))
            return None
        if request.typed:
            stages = typed(stages, request.text)
        elif request.mode == "manual":
            stages = push_to_talk(stages)
        turn = ServerTurn(self.channel, request, self.settings, self.clock, self, self.packet_ms)
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
        self.idle.active()
        timeline.packets = turn.packets
        timeline.dropped = self.ignored.take()
        self.turns.finished(turn.request, timeline)
        if not timeline.ok and self.mode == "auto":  # the device still streams: the next utterance is heard
            self.listening = True
        if self.goodbye is turn:
            await self.channel.close(CLOSE_NORMAL, "")  # the idle goodbye has been said (sendAudioHandle.py)

    def _busy(self) -> bool:
        """A turn that heard speech is under way: the session is not idle, whatever the frames hold."""
        return any(not turn.unheard for turn in self.running)

    def _say_goodbye(self) -> None:
        """No voice for ``idle_goodbye_s`` while audio came: the LLM says goodbye, then the connection closes."""
        self._reset_audio("the session is saying goodbye")
        self.goodbye = self._begin(self._request("idle", None, self.settings.end_prompt))

    async def _watch_idle(self) -> None:
        """No audio at all for ``idle_close_s`` closes the connection (connection.py, every 10 s)."""
        while True:
            await asyncio.sleep(self.idle.check_every_s)
            if self.idle.silent_too_long(self._busy()):
                await self.channel.close(CLOSE_NORMAL, "")
                return

    async def _stop_answers(self, why: str) -> None:
        """An answer the device is speaking stops before something else is said (startToChat's abort)."""
        for turn in list(self.running):
            if turn.told_start and not turn.stop_sent and self.mode != "manual":
                await tell(self.channel, turn.tell_stop())
                turn.abort("interrupted", why)

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

    # --- what turns tell the session (turn.TurnWatcher) ------------------------

    def endpointed(self, turn: ServerTurn) -> None:
        """Listening on: the audio after this end-point belongs to the next utterance."""
        if self.listening and self.collecting is turn:
            turn.close_uplink()
            self.collecting = None

    def recognised(self, turn: ServerTurn) -> None:
        """A new utterance stops the answer the device is playing (not in manual mode, as the real server)."""
        self.idle.active()
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

    def _count(self, what: str) -> None:
        self.ignored.count(what)
