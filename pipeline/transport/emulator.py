"""A xiaozhi device over WebSocket or MQTT + UDP: it replays a clip as Opus at real-time pace and plays the answer.

The device knows only what crosses the wire, so its timeline is built from what it
sent and received: the frame that held the end of speech (found by running the
run's VAD over the clip beforehand), ``stt``, ``llm``, each ``sentence_start``, the
first audio frame, the first frame with sound in it once played, ``tts stop``, the
last frame played. Those make the turn's rows whichever server answers, ours or not.

It behaves as the firmware (xiaozhi-esp32 main/application.cc) does where that shows on the wire
or in the figures: audio is played only between ``tts start`` and ``tts stop`` and played as it
arrives; in realtime mode one ``listen start`` opens a microphone that streams for the whole
connection; barge-in follows the firmware's wake-word or button path; MCP requests are answered
whenever they come; a connection the server closed while the device was idle is opened again.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.clock import Clock
from pipeline.endpoints.link.profiles import NetProfile
from pipeline.events import FRAME_MS, FRAME_SAMPLES, AudioFrame, AudioOut, Event
from pipeline.run.device import Player, close, drain
from pipeline.run.recorder import TurnRecorder
from pipeline.run.session import Ask
from pipeline.run.turn import supervise
from pipeline.tracing.timeline import DeviceTiming, TurnTimeline
from pipeline.transport import protocol
from pipeline.transport.codec import CodecError, OpusDecoder, OpusEncoder, audible
from pipeline.transport.device_links import DeviceError, DeviceLink, LinkSettings, open_link
from pipeline.transport.device_mcp import DeviceMcp
from pipeline.transport.protocol import ChannelGone, ProtocolError

__all__ = ["BARGE_IN_WAYS", "DeviceError", "DeviceSettings", "EmulatedDevice"]

# wake: the wake word while Speaking; button: the talk button while Speaking; speech: the user just
# starts speaking the next question
BARGE_IN_WAYS = ("wake", "button", "speech")
# The microphone's own noise when nobody speaks: the firmware streams its microphone, never digital zero.
NOISE_FLOOR_DBFS = -60.0
_DRAINED = object()  # in the playout queue: everything before it has been played


@dataclass(frozen=True, slots=True)
class DeviceSettings:
    url: str
    token: str = field(default="", repr=False)
    protocol_version: int = 1
    # auto: the server's VAD ends the turn; manual: the device sends listen stop; realtime: one listen
    # start per connection, the microphone never stops, each question announced by a lab message
    listen_mode: str = "auto"
    device_id: str = "02:00:00:00:00:01"
    client_id: str = ""  # "": stable per device id, as a board's UUID is
    mqtt_signature_key: str = field(default="", repr=False)  # an mqtt:// server's: signs the device's password
    # frames held before the first one of an answer plays; the firmware holds none (audio_service.cc)
    jitter_frames: int = 0
    tail_ms: int = 3000  # auto mode: noise floor streamed after the clip until the server says what it heard
    connect_timeout_s: float = 10.0
    turn_timeout_s: float = 60.0
    barge_in_after_ms: int | None = None  # the user cuts in this long after the answer became audible
    barge_in_with: str = "wake"  # one of BARGE_IN_WAYS
    encoder_preset: str = "firmware"  # the uplink Opus encoder (pipeline.transport.codec presets)
    mcp_wait_s: float = 3.0  # after hello: wait this long at most for the server's tools/list
    profile: NetProfile | None = None  # the link emulator between device and server; None: direct

    def __post_init__(self) -> None:
        if self.listen_mode not in protocol.LISTEN_MODES:
            raise ValueError(f"listen_mode {self.listen_mode!r}: one of {', '.join(protocol.LISTEN_MODES)}")
        if self.barge_in_with not in BARGE_IN_WAYS:
            raise ValueError(f"barge_in_with {self.barge_in_with!r}: one of {', '.join(BARGE_IN_WAYS)}")
        if self.jitter_frames < 0:
            raise ValueError(f"jitter_frames {self.jitter_frames}: 0 or more")


class NoiseFloor:
    """Low-level Gaussian noise at NOISE_FLOOR_DBFS (RMS), seeded so that runs repeat."""

    def __init__(self, seed: str) -> None:
        self._rng = np.random.default_rng(zlib.crc32(seed.encode()))
        self._sigma = 32767 * 10 ** (NOISE_FLOOR_DBFS / 20)

    def frame(self) -> bytes:
        samples = np.rint(self._rng.normal(0.0, self._sigma, FRAME_SAMPLES))
        return np.clip(samples, -32768, 32767).astype("<i2").tobytes()


class EmulatedDevice:
    """One device session: ``async with`` connects and says hello; ``turn`` runs one question."""

    def __init__(self, settings: DeviceSettings, clock: Clock) -> None:
        self.settings, self.clock = settings, clock
        s = settings
        self.link_settings = LinkSettings(
            s.url,
            s.token,
            s.protocol_version,
            s.device_id,
            s.connect_timeout_s,
            s.profile,
            s.client_id,
            mqtt_signature_key=s.mqtt_signature_key,
        )
        self.mcp = DeviceMcp()  # the device's state outlives its connections
        self.noise = NoiseFloor(s.device_id)
        self.link = self._new_link()
        self.label = self.link.label
        self.mic: _Microphone | None = None
        self.reconnects = 0
        self._listed = asyncio.Event()
        self._pending: _DeviceTurn | None = None  # a turn the user started by barging in, not yet asked for

    @property
    def session_id(self) -> str:
        return self.link.session_id

    @property
    def realtime(self) -> bool:
        return self.settings.listen_mode == "realtime"

    def _new_link(self) -> DeviceLink:
        link = open_link(self.link_settings, self.clock)

        async def answer(message: dict[str, Any]) -> None:
            await self._answer_mcp(link, message)

        link.on_mcp = answer
        return link

    async def __aenter__(self) -> EmulatedDevice:
        await self._connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._pending is not None:
            await self._pending.stop()
            self._pending = None
        await self._disconnect()

    async def _connect(self) -> None:
        self._listed = asyncio.Event()
        await self.link.open()
        if self.realtime:  # application.cc: one listen start on entering Listening; the processor keeps running
            await self.link.send_json(self.listen_message(None))
            self.mic = _Microphone(self, self.link)
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

    async def _reconnect(self) -> None:
        """application.cc: the next wake opens the audio channel again (connect, hello)."""
        await self._disconnect()
        self.link = self._new_link()
        await self._connect()
        self.reconnects += 1

    async def _answer_mcp(self, link: DeviceLink, message: dict[str, Any]) -> None:
        payload = message.get("payload")
        reply = self.mcp.handle(payload)
        if reply is None:
            return
        with contextlib.suppress(ChannelGone):
            await link.send_json({"session_id": link.session_id, "type": "mcp", "payload": reply})
        if isinstance(payload, dict) and payload.get("method") == "tools/list" and "result" in reply:
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
        reconnected = 0
        if not self.link.is_open:  # the server closed it while the device was idle: open it again
            try:
                await self._reconnect()
                reconnected = 1
            except DeviceError as exc:
                failed = _DeviceTurn(self, ask)
                failed.recorder.fail("disconnected", str(exc))
                return failed.recorder.finish()
        turn = _DeviceTurn(self, ask)
        turn.timing.reconnects = reconnected
        try:
            await turn.start()
        except ChannelGone as exc:
            turn.recorder.fail("disconnected", str(exc))
            return turn.recorder.finish()
        return await self._finish(turn, then)

    async def _finish(self, turn: _DeviceTurn, then: Ask | None) -> TurnTimeline:
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
        _check(recorder)
        if not tl.ok and self.link.is_open:
            if self._pending is not None:
                await self._pending.stop()
                self._pending = None
            await _abandon(self.link, self.session_id)
        return recorder.finish()

    def barge_in(self, then: Ask, after: asyncio.Event | None, listen: bool) -> None:
        """The user starts the next question now: its turn begins while the old answer stops.

        ``after``: what ``listen start`` waits for (the old answer played out); ``listen``: whether
        the device says ``listen start`` at all (realtime speech: it is listening already)."""
        turn = _DeviceTurn(self, then)
        turn.sending = asyncio.create_task(turn.start_speaking(after, listen))
        self._pending = turn

    def listen_message(self, ask: Ask | None) -> dict[str, Any]:
        """``listen start`` in the device's mode; with ``ask``, naming the question for a server of ours."""
        listen: dict[str, Any] = {
            "type": "listen",
            "state": "start",
            "mode": self.settings.listen_mode,
            "session_id": self.session_id,
        }
        if ask is not None:
            listen["lab"] = {"question_id": ask.question_id, "round": ask.round_no}  # real servers ignore it
            if ask.traceparent:
                listen["traceparent"] = ask.traceparent
        return listen

    def lab_message(self, ask: Ask) -> dict[str, Any]:
        """Realtime mode: the question about to be spoken, for a server of ours (real ones ignore the type)."""
        message: dict[str, Any] = {
            "type": "lab",
            "state": "question",
            "session_id": self.session_id,
            "question_id": ask.question_id,
            "round": ask.round_no,
        }
        if ask.traceparent:
            message["traceparent"] = ask.traceparent
        return message


class _Microphone:
    """Realtime mode: the microphone streams for the whole connection, one frame per 60 ms: the asked
    question's clip, the noise floor otherwise (application.cc keeps the audio processor running)."""

    def __init__(self, device: EmulatedDevice, link: DeviceLink) -> None:
        self.device, self.link = device, link
        self.turn: _DeviceTurn | None = None  # whose question is spoken, and whose frames these are
        self.task = asyncio.create_task(self._run())

    def ask(self, turn: _DeviceTurn) -> None:
        turn.mic_pos = 0
        self.turn = turn

    def release(self, turn: _DeviceTurn) -> None:
        if self.turn is turn:
            self.turn = None

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        encoder = OpusEncoder(preset=self.device.settings.encoder_preset)
        due, position = loop.time(), 0
        with contextlib.suppress(ChannelGone):  # the connection is gone: so is its microphone
            while True:
                due += FRAME_MS / 1000
                await asyncio.sleep(max(0.0, due - loop.time()))
                turn, spoken = self.turn, None
                if turn is not None and turn.mic_pos < len(turn.frames):
                    if turn.mic_pos == 0:
                        await self.link.send_json(self.device.lab_message(turn.ask))
                    spoken = turn.frames[turn.mic_pos]
                    turn.mic_pos += 1
                packet = encoder.encode(spoken.pcm if spoken is not None else self.device.noise.frame())
                now = self.device.clock.now_ns()
                await self.link.send_audio(packet, position * FRAME_MS)
                position += 1
                if turn is not None:
                    turn.sent(spoken, now)


class _DeviceTurn:
    def __init__(self, device: EmulatedDevice, ask: Ask) -> None:
        self.device, self.ask = device, ask
        self.link, self.settings, self.session_id = device.link, device.settings, device.session_id
        self.clock = device.clock
        self.recorder = TurnRecorder(self.clock)
        self.timing = DeviceTiming(transport=self.link.transport, protocol_version=self.settings.protocol_version)
        self.recorder.timeline.device = self.timing
        self.frames = frames = ask.frames
        self.sending: asyncio.Task[None] | None = None
        # the frame that holds the last speech; no speech found: the clip's last frame
        end = ask.speech_end_ms if ask.speech_end_ms is not None else len(frames) * FRAME_MS
        self.speech_end_seq = min(max(0, (end - 1) // FRAME_MS), max(0, len(frames) - 1))
        self.heard = asyncio.Event()
        self.sounding = asyncio.Event()  # the answer became audible
        self.drained = asyncio.Event()  # after a wake-word abort: what was buffered has been played
        self.cut = False  # the device left Speaking: audio still arriving is not played
        self.mic_pos = 0  # realtime: the next clip frame the microphone sends
        self.playout: asyncio.Queue[object] = asyncio.Queue()

    async def start(self) -> None:
        """Say ``listen start`` and start the microphone (realtime: it runs; it speaks the question now)."""
        self.timing.dropped_frames += self.link.turn_started()
        if self.device.realtime:
            assert self.device.mic is not None
            self.device.mic.ask(self)
            return
        await self.link.send_json(self.device.listen_message(self.ask))
        self.sending = asyncio.create_task(self.send())

    async def start_speaking(self, after: asyncio.Event | None, listen: bool) -> None:
        """A barge-in: ``listen start`` mid-answer once ``after`` is set, then the question's audio."""
        if after is not None:
            await after.wait()
        try:
            if listen:
                await self.link.send_json(self.device.listen_message(None if self.device.realtime else self.ask))
        except ChannelGone as exc:
            self.recorder.fail("disconnected", str(exc))
            return
        if self.device.realtime:
            if self.device.mic is not None:
                self.device.mic.ask(self)
            return
        await self.send()

    async def stop(self) -> None:
        if self.sending is not None:
            self.sending.cancel()
            await asyncio.gather(self.sending, return_exceptions=True)
        if self.device.mic is not None:
            self.device.mic.release(self)

    def sent(self, frame: AudioFrame | None, now: int) -> None:
        """One uplink frame handed to the transport at ``now``: ``frame`` from the clip, None the noise floor."""
        t = self.timing
        t.uplink_frames += 1
        t.last_uplink_ns = now
        if t.first_uplink_ns is None:
            t.first_uplink_ns = now
            self.recorder.timeline.vad.first_frame_ns = now
        if frame is not None and frame.seq == self.speech_end_seq:
            t.speech_end_frame = frame.seq
            self.recorder.timeline.vad.user_speech_end_ns = now

    async def send(self) -> None:
        """Auto and manual mode's microphone: each frame once its 60 ms are captured; in auto mode the
        noise floor after the clip until the server hears (at most ``tail_ms``); manual: ``listen stop``."""
        loop = asyncio.get_running_loop()
        encoder = OpusEncoder(preset=self.settings.encoder_preset)
        due = loop.time()
        tail = self.settings.tail_ms // FRAME_MS if self.settings.listen_mode == "auto" else 0
        for index in range(len(self.frames) + tail):
            if index >= len(self.frames) and self.heard.is_set():
                break
            frame = self.frames[index] if index < len(self.frames) else None
            due += (frame.duration_ms if frame is not None else FRAME_MS) / 1000
            await asyncio.sleep(max(0.0, due - loop.time()))
            packet = encoder.encode(frame.pcm if frame is not None else self.device.noise.frame())
            now = self.clock.now_ns()  # handed to the transport now: the server may have it before send_audio returns
            await self.link.send_audio(packet, index * FRAME_MS)
            self.sent(frame, now)
        if self.settings.listen_mode == "manual":
            await self.link.send_json({"type": "listen", "state": "stop", "session_id": self.session_id})

    async def receive(self) -> None:
        """The server's messages until ``tts stop``, stamped on arrival. Audio is played only between
        ``tts start`` and ``tts stop`` (application.cc plays it only while Speaking): outside, it is
        dropped and counted; the first ``jitter_frames`` frames of the answer wait for each other."""
        decoder = OpusDecoder()
        held: list[AudioOut] | None = [] if self.settings.jitter_frames else None
        sentence, speaking = -1, False
        try:
            while True:
                try:
                    now, message = await self.link.recv_at()
                except ChannelGone as exc:
                    self.recorder.fail("disconnected", str(exc))
                    raise
                if isinstance(message, protocol.Packet) and message.kind == protocol.TYPE_OPUS:
                    if not speaking:
                        self.timing.dropped_frames += 1
                        continue
                    frame = self._audio(decoder, message.payload, max(sentence, 0), now)
                    if frame is None:
                        continue
                    if held is None:
                        self.playout.put_nowait(frame)
                        continue
                    held.append(frame)
                    if len(held) >= self.settings.jitter_frames:  # enough to start: from now on, as they come
                        for item in held:
                            self.playout.put_nowait(item)
                        held = None
                    continue
                text = message.payload if isinstance(message, protocol.Packet) else message
                state = self._control(protocol.parse(text), now)
                if state == "start":
                    speaking = True
                elif state == "sentence_start":
                    sentence += 1
                elif state == "stop":
                    break
        finally:
            for item in held if held and not self.cut else []:
                self.playout.put_nowait(item)
            close(self.playout)

    def _audio(self, decoder: OpusDecoder, payload: bytes, sentence: int, now: int) -> AudioOut | None:
        """One frame of the answer, counted; decoded unless the device has stopped playing."""
        if self.timing.first_audio_received_ns is None:
            self.timing.first_audio_received_ns = now
        self.timing.last_audio_received_ns = now
        self.timing.downlink_frames += 1
        if self.cut:  # cut off: still arriving, never played
            return None
        try:
            pcm = decoder.decode(payload)
        except CodecError:
            self.timing.undecodable_frames += 1
            return None
        return AudioOut(sentence_index=sentence, seq=self.timing.downlink_frames, pcm=pcm)

    def _control(self, message: dict[str, Any], now: int) -> str:
        """Stamps what the message says; a ``tts`` message's state, or its type."""
        kind, state = message["type"], message.get("state")
        if kind == "stt":
            self.timing.stt_ns = now
            self.timing.transcript = str(message.get("text", ""))
            self.heard.set()
        elif kind == "llm" and self.timing.llm_ns is None:
            self.timing.llm_ns = now
        elif kind == "tts" and state == "start":
            self.heard.set()
            return "start"
        elif kind == "tts" and state == "sentence_start":
            self.timing.sentence_starts.append((now, str(message.get("text", ""))))
            return "sentence_start"
        elif kind == "tts" and state == "stop":
            self.timing.tts_stop_ns = now
            return "stop"
        return str(kind)  # anything else a server sends (emotion, alert, ...) is tolerated

    async def play(self) -> None:
        async for event in self.recorder.wrap("player", Player(), self._playout()):
            if isinstance(event, AudioOut) and self.timing.first_audible_ns is None and audible(event.pcm):
                # the player yields a frame once played: its sound began one frame earlier
                self.timing.first_audible_ns = self.clock.now_ns() - event.duration_ms * 1_000_000
                self.sounding.set()

    async def _playout(self) -> AsyncIterator[Event]:
        """The frames to play; the player takes the next only once the one before has played."""
        try:
            async for item in drain(self.playout):
                if item is _DRAINED:
                    self.drained.set()
                    continue
                yield item
        finally:
            self.drained.set()

    async def interrupt(self, after_ms: int, then: Ask | None) -> None:
        """Barge-in once the answer has sounded for ``after_ms``, by ``barge_in_with``:

        - wake: ``abort`` with reason ``wake_word_detected``; in auto mode what is buffered plays out
          and ``listen start`` waits until it has (application.cc:811-838, 932-946); in the other modes
          listening starts at once and resets the decoder (StartListeningAudio -> ResetDecoder).
        - button: ``abort`` without reason, the buffer dropped, ``listen start`` at once
          (protocol.cc:58-65, application.cc:790-792).
        - speech: the user speaks the next question: in realtime mode only its audio (the device plays
          on until the server stops the answer); otherwise the device falls silent and says
          ``listen start`` mid-answer.

        Afterwards the device no longer plays what arrives (it has left Speaking). ``then``: the
        question the user goes on with, whose turn starts here; None: no ``listen start``."""
        await self.sounding.wait()
        await asyncio.sleep(max(0, after_ms - FRAME_MS) / 1000)  # it became audible one frame ago
        self.timing.abort_ns = self.clock.now_ns()
        way, mode = self.settings.barge_in_with, self.settings.listen_mode
        if way == "speech":
            if mode != "realtime":
                self.cut = True
                self._drop_buffered()
            if then is not None:
                self.device.barge_in(then, None, listen=mode != "realtime")
            return
        self.cut = True
        play_out = way == "wake" and mode == "auto"
        if play_out:
            self.playout.put_nowait(_DRAINED)
        else:
            self._drop_buffered()
        abort: dict[str, Any] = {"session_id": self.session_id, "type": "abort"}
        if way == "wake":
            abort["reason"] = "wake_word_detected"
        await self.link.send_json(abort)
        if then is not None:
            self.device.barge_in(then, self.drained if play_out else None, listen=True)

    def _drop_buffered(self) -> None:
        """What is buffered is dropped; the frame playing now finishes."""
        waiting = []
        while not self.playout.empty():
            item = self.playout.get_nowait()
            if not isinstance(item, AudioOut):
                waiting.append(item)
        for item in waiting:
            self.playout.put_nowait(item)


def _check(recorder: TurnRecorder) -> None:
    """A device's turn is complete when the server said what it heard and the answer was played."""
    tl, device = recorder.timeline, recorder.timeline.device
    if not tl.ok or device is None:
        return
    if device.stt_ns is None or not device.transcript.strip():
        recorder.fail("empty_transcript", "the server sent no recognised text (stt)")
    elif tl.playback.last_end_ns is None:
        recorder.fail("no_audio_out", "the server sent no audio")
    elif device.undecodable_frames:
        recorder.fail("bad_audio", f"{device.undecodable_frames} downlink frame(s) could not be decoded")


async def _abandon(link: DeviceLink, session_id: str, wait_s: float = 5.0) -> None:
    """A failed turn is aborted on the server too (an abort as the button sends it, without reason),
    and its last messages read, so the next turn starts clean."""
    with contextlib.suppress(ChannelGone, TimeoutError, ProtocolError):
        await link.send_json({"session_id": session_id, "type": "abort"})
        async with asyncio.timeout(wait_s):
            while True:
                message = await link.recv()
                if isinstance(message, str) and protocol.parse(message).get("state") == "stop":
                    return
