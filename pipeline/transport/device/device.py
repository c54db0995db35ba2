"""A xiaozhi device over WebSocket or MQTT + UDP: it replays a clip as Opus at real-time pace and plays the answer.

It behaves as the firmware (xiaozhi-esp32 main/application.cc) does where that shows on the wire
or in the figures: audio is played only between ``tts start`` and ``tts stop`` and played as it
arrives; in realtime mode one ``listen start`` opens a microphone that streams for the whole
connection; barge-in follows the firmware's wake-word or button path; MCP requests are answered
whenever they come. A connection that was lost (the server closed it, went away, or was hung up on) is
opened again when the next question wakes the device, on the firmware's backoff (``reconnect``); a turn
the loss cut is a failed row (``disconnected``) and the next question goes on once the server answers
again, or is a failed row itself when it never does. Each
question is a ``turn.DeviceTurn``; its rows come from what crossed the wire, whichever server answers.
Each turn is labelled cold or warm (``names.TURN_TEMPERATURES``): the first on a connection has its
set-up just behind it, one a wake word started mid-answer the firmware's wake path. With a
``recording.RecordTo`` the device records what it sent and played, from its first connection on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from pipeline.clock import Clock
from pipeline.run.device_side import Ask
from pipeline.run.turn import supervise
from pipeline.tracing.timeline import Reconnection, TurnTimeline
from pipeline.transport.device.device_recording import AudioRecording, RecordTo
from pipeline.transport.device.device_settings import FIRMWARE_BACKOFF, DeviceSettings, LinkSettings
from pipeline.transport.device.device_turn import DeviceTurn, abandon, check_answered
from pipeline.transport.device.dial import open_link
from pipeline.transport.device.link import LOST, DeviceError, DeviceLink, why_gone
from pipeline.transport.device.microphone import Microphone
from pipeline.transport.device.reconnect import gave_up, reopen
from pipeline.transport.device.speaker import DeviceSound
from pipeline.transport.device.tools import EmulatedTools
from pipeline.transport.device.uplink_packets import NoiseLoop
from pipeline.transport.wire import mcp
from pipeline.transport.wire.failures import ChannelGone
from pipeline.transport.wire.messages import LabTag, Listen, Mcp

Dial = Callable[[LinkSettings, Clock], DeviceLink]  # the link a device opens (tests give it another)
SETTLE_MAX_S = 30.0  # a server that never falls quiet: ask all the same, the wait recorded on the turn

__all__ = ["DeviceError", "DeviceSettings", "EmulatedDevice"]


class EmulatedDevice:
    """One device session: ``async with`` connects and says hello; ``turn`` runs one question."""

    def __init__(
        self, settings: DeviceSettings, clock: Clock, record: RecordTo | None = None, dial: Dial = open_link
    ) -> None:
        self.settings, self.clock, self.dial = settings, clock, dial
        self.record_to = record
        self.recording: AudioRecording | None = None
        self._fresh = False  # a connection was opened and no turn has run on it yet
        self.link_settings = settings.link()
        self.tools = EmulatedTools()  # the device's state outlives its connections
        self.noise = NoiseLoop(settings.device_id, settings.encoder_preset)
        self.link = self._new_link()
        self.label = self.link.label
        self.mic: Microphone | None = None
        self.sound: DeviceSound | None = None  # opened with the device, kept across its connections
        self.reconnects = 0
        self._answered_ns = 0  # when the server last answered a hello
        self._lost_ns: int | None = None  # when the connection was lost, until it is answered again
        self._loss_told: int | None = None  # the loss a turn's row already tells of
        self._listed = asyncio.Event()
        self._pending: DeviceTurn | None = None  # a turn the user started by barging in, not yet asked for

    @property
    def session_id(self) -> str:
        return self.link.session_id

    @property
    def realtime(self) -> bool:
        return self.settings.listen_mode == "realtime"

    def _new_link(self) -> DeviceLink:
        link = self.dial(self.link_settings, self.clock)

        async def answer(message: Mcp) -> None:
            await self._answer_mcp(link, message)

        link.on_mcp = answer
        return link

    async def __aenter__(self) -> EmulatedDevice:
        if self.settings.sound:
            self.sound = await asyncio.to_thread(DeviceSound, self.settings.sound, self.label)
        try:
            await self._connect()
        except BaseException:
            if self.recording is not None:  # the device never ran: its recording is what it was
                self.recording.close(self.clock.now_ns())
            if self.sound is not None:
                await asyncio.to_thread(self.sound.close)
                self.sound = None
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._pending is not None:
            await self._pending.stop()
            self._pending = None
        try:
            await self._disconnect()
        finally:
            if self.recording is not None:
                self.recording.close(self.clock.now_ns())
            if self.sound is not None:
                await asyncio.to_thread(self.sound.close)
                self.sound = None

    async def _connect(self) -> None:
        self._listed = asyncio.Event()
        if self.record_to is not None and self.recording is None:  # sample 0: the first connection opens
            self.recording = self.record_to.open(self.clock.now_ns())
        await self.link.open()
        self._answered_ns = self.clock.now_ns()
        self._fresh = True
        if self.realtime:  # application.cc: one listen start on entering Listening; the processor keeps running
            await self.link.send(self.listen_message(None))
            self.mic = Microphone(self.link, self.settings, self.noise, self.clock, self.recording)
        # The real server asks for tools/list about a second after the device answered initialize
        # (mcp_handler.py sleeps 1 s): a question asked at once would reach a server that does not know
        # the device's tools yet. A server that never asks costs this wait once per connection.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.mcp_wait_s):
                await self._listed.wait()

    async def _disconnect(self) -> None:
        if self.mic is not None:
            await self.mic.stop()
            self.mic = None
        await self.link.close()

    async def _reconnect(self) -> int:
        """application.cc: the next wake opens the audio channel again (connect, hello); when it was answered."""
        await self._disconnect()
        self.link = self._new_link()
        await self._connect()
        self.reconnects += 1
        return self._answered_ns

    async def _come_back(self) -> Reconnection:
        """The lost connection opened again, on the firmware's backoff for the transport; what happened."""
        if self._lost_ns is None:
            gone = self.link.lost()
            self._lost_ns = gone.at_ns if gone is not None and gone.at_ns is not None else self.clock.now_ns()
        backoff = self.settings.backoff or FIRMWARE_BACKOFF[self.link.transport]
        back = await reopen(self._reconnect, backoff, self.clock, self._lost_ns)
        if back.answered_ns is not None:
            self._lost_ns = None
        return back

    def _tell_loss(self, turn: TurnTimeline, lost_ns: int | None) -> None:
        """The loss at ``lost_ns`` on ``turn``'s row, unless a row already tells of it."""
        if lost_ns is not None and lost_ns != self._loss_told and turn.device is not None:
            turn.device.disconnected_ns = self._loss_told = lost_ns

    async def _answer_mcp(self, link: DeviceLink, message: Mcp) -> None:
        payload = message.payload
        reply = self.tools.handle(payload)
        if reply is None:
            return
        with contextlib.suppress(ChannelGone):
            await link.send(Mcp(payload=reply, session_id=link.session_id))
        if isinstance(payload, mcp.Request) and payload.method == mcp.TOOLS_LIST and isinstance(reply, mcp.Result):
            self._listed.set()

    async def turn(self, ask: Ask, then: Ask | None = None) -> TurnTimeline:
        """Ask one question; the device's timeline of it, failures recorded on it (M7).

        ``ask.traceparent`` (W3C) goes with ``listen`` (realtime: with the ``lab`` message): a server of
        ours makes its spans children of it. ``then``: the next question, which a user barging in
        starts mid-answer; its turn is then already under way when ``turn`` is called for it."""
        pending, self._pending = self._pending, None
        if pending is not None and pending.ask == ask:
            turn = pending
            self.link.turn_started(drain=False)  # the old answer has stopped: what comes now is this turn's
            return await self._finish(turn, then)
        if pending is not None:  # started for a question that is not the one asked now
            await pending.stop()
        back = await self._come_back() if not self.link.is_open else None
        if back is not None and back.answered_ns is None:  # never answered: the question is a failed row
            failed = DeviceTurn(self, ask)
            failed.timing.temperature = "cold_connection"  # it tried to set one up
            failed.timing.reconnection = back
            self._tell_loss(failed.recorder.timeline, back.lost_ns)
            failed.recorder.fail(LOST, gave_up(back))
            return failed.recorder.finish()
        settled = await self._settle()
        turn = DeviceTurn(self, ask)
        turn.timing.settle_wait_ns = settled
        turn.timing.temperature = self._temperature(woken=False)
        turn.timing.reconnects = int(back is not None)
        turn.timing.reconnection = back
        if back is not None:
            self._tell_loss(turn.recorder.timeline, back.lost_ns)
        try:
            await turn.start()
        except ChannelGone as exc:
            gone = why_gone(self.link, exc)
            turn.recorder.fail(gone.kind, str(gone))
            return turn.recorder.finish()
        return await self._finish(turn, then)

    async def _finish(self, turn: DeviceTurn, then: Ask | None) -> TurnTimeline:
        recorder, tl = turn.recorder, turn.recorder.timeline
        others = [turn.sending] if turn.sending is not None else []
        after = self.settings.barge_in_after_ms
        speech = self.settings.barge_in_with == "speech"
        if after is not None and (not speech or then is not None):  # speech: the last question has no next one
            others.append(asyncio.create_task(turn.interrupt(after, then)))
        work = [asyncio.create_task(turn.receive()), asyncio.create_task(turn.play())]
        await supervise(recorder, work, others, self.settings.turn_timeout_s)
        turn.drained.set()  # whatever was left unplayed is gone with the turn
        if self.mic is not None:
            self.mic.release(turn)
        tl.packets = self.link.packet_counts()
        if (gone := self.link.lost()) is not None:  # lost in the turn: its row tells of it
            self._tell_loss(tl, gone.at_ns)
        check_answered(recorder)
        if not tl.ok and self.link.is_open:
            if self._pending is not None:
                await self._pending.stop()
                self._pending = None
            await abandon(self.link, self.session_id)
        return recorder.finish()

    def barge_in(self, then: Ask, after: asyncio.Event | None, listen: bool) -> None:
        """The user starts the next question now: its turn begins while the old answer stops.

        ``after``: what ``listen start`` waits for (the old answer played out); ``listen``: whether
        the device says ``listen start`` at all (realtime speech: it is listening already)."""
        turn = DeviceTurn(self, then)
        turn.timing.temperature = self._temperature(woken=self.settings.barge_in_with == "wake")
        turn.sending = asyncio.create_task(turn.start_speaking(after, listen))
        self._pending = turn

    async def _settle(self) -> int:
        """Before a question: wait until the server has sent nothing for ``settle_ms`` (at most ``SETTLE_MAX_S``);
        how long it waited (ns). What it sent meanwhile belongs to no turn (the turn's start drops it, counted)."""
        quiet = self.settings.settle_ms * 1_000_000
        if not quiet:
            return 0
        start = now = self.clock.now_ns()
        give_up = start + round(SETTLE_MAX_S * 1e9)
        while (last := self.link.last_arrival_ns()) is not None and now - last < quiet and now < give_up:
            await asyncio.sleep(min(quiet - (now - last), give_up - now) / 1e9)
            now = self.clock.now_ns()
        return now - start

    def _temperature(self, woken: bool) -> str:
        """A new turn's label: the first on its connection, one a wake word started, or warm."""
        if self._fresh:
            self._fresh = False
            return "cold_connection"
        return "cold_wake" if woken else "warm"

    def listen_message(self, ask: Ask | None) -> Listen:
        """``listen start`` in the device's mode; with ``ask``, naming the question for a server of ours."""
        if ask is None:
            return Listen("start", mode=self.settings.listen_mode, session_id=self.session_id)
        return Listen(
            "start",
            mode=self.settings.listen_mode,
            session_id=self.session_id,
            lab=LabTag(ask.question_id, ask.round_no),  # real servers ignore it
            traceparent=ask.traceparent or None,
        )
