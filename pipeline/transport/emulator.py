"""A xiaozhi device over WebSocket: it replays a clip as Opus at real-time pace and plays the answer.

The device knows only what crosses the wire, so its timeline is built from what it
sent and received: the frame that held the end of speech (found by running the
run's VAD over the clip beforehand), ``stt``, ``llm``, each ``sentence_start``, the
first audio frame, the first frame with sound in it once played, ``tts stop``, the
last frame played. Those make the turn's rows whichever server answers, ours or not.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from pipeline.clock import Clock
from pipeline.endpoints.link.profiles import NetProfile
from pipeline.events import FRAME_BYTES, FRAME_MS, AudioFrame, AudioOut
from pipeline.run.device import Player, close, drain
from pipeline.run.recorder import TurnRecorder
from pipeline.run.session import Ask
from pipeline.run.turn import supervise
from pipeline.tracing.timeline import DeviceTiming, TurnTimeline
from pipeline.transport import protocol
from pipeline.transport.codec import CodecError, OpusDecoder, OpusEncoder, audible
from pipeline.transport.device_links import DeviceError, DeviceLink, LinkSettings, open_link
from pipeline.transport.protocol import ChannelGone, ProtocolError

__all__ = ["DeviceError", "DeviceSettings", "EmulatedDevice"]


@dataclass(frozen=True, slots=True)
class DeviceSettings:
    url: str
    token: str = field(default="", repr=False)
    protocol_version: int = 1
    listen_mode: str = "auto"  # auto: the server's VAD ends the turn; manual: the device sends listen stop
    device_id: str = "02:00:00:00:00:01"
    jitter_frames: int = 2  # frames held before playback starts, as a device's buffer does
    tail_ms: int = 3000  # auto mode: silence streamed after the clip until the server says what it heard
    connect_timeout_s: float = 10.0
    turn_timeout_s: float = 60.0
    barge_in_after_ms: int | None = None  # the user cuts in this long after the answer became audible
    barge_in_with: str = "abort"  # abort: the device sends abort; speech: the user starts the next question
    profile: NetProfile | None = None  # the link emulator between device and server; None: direct


class EmulatedDevice:
    """One device session: ``async with`` connects and says hello; ``turn`` runs one question."""

    def __init__(self, settings: DeviceSettings, clock: Clock) -> None:
        self.settings, self.clock = settings, clock
        s = settings
        self.link = open_link(
            LinkSettings(s.url, s.token, s.protocol_version, s.device_id, s.connect_timeout_s, s.profile)
        )
        self.label = self.link.label
        self._pending: _DeviceTurn | None = None  # a turn the user started by barging in, not yet asked for

    @property
    def session_id(self) -> str:
        return self.link.session_id

    async def __aenter__(self) -> EmulatedDevice:
        await self.link.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.link.close()

    async def turn(self, ask: Ask, then: Ask | None = None) -> TurnTimeline:
        """Ask one question; the device's timeline of it, failures recorded on it (M7).

        ``ask.traceparent`` (W3C) goes with ``listen``: a server of ours makes its spans children of it.
        ``then``: the next question, which a user barging in by speaking starts mid-answer; its turn
        is then already under way when ``turn`` is called for it."""
        pending, self._pending = self._pending, None
        if pending is not None and pending.ask == ask:
            turn = pending
            self.link.turn_started()  # the old answer has stopped: what comes now is this turn's
        else:
            if pending is not None:  # started for a question that is not the one asked now
                await pending.stop()
            turn = _DeviceTurn(self, ask)
            if not self.link.is_open:
                turn.recorder.fail("disconnected", "the connection to the server is gone")
                return turn.recorder.finish()
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
            others.append(asyncio.create_task(turn.interrupt(after, then if speech else None)))
        work = [asyncio.create_task(turn.receive()), asyncio.create_task(turn.play())]
        await supervise(recorder, work, others, self.settings.turn_timeout_s)
        tl.packets = self.link.packet_counts()
        _check(recorder)
        if not tl.ok and self.link.is_open:
            if self._pending is not None:
                await self._pending.stop()
                self._pending = None
            await _abandon(self.link, self.session_id)
        return recorder.finish()

    def barge_in(self, then: Ask) -> None:
        """The user starts speaking the next question now: its turn begins while the old answer stops."""
        turn = _DeviceTurn(self, then)
        turn.sending = asyncio.create_task(turn.start_speaking())
        self._pending = turn

    def listen_message(self, ask: Ask) -> dict[str, Any]:
        listen: dict[str, Any] = {
            "type": "listen",
            "state": "start",
            "mode": self.settings.listen_mode,
            "session_id": self.session_id,
        }
        listen["lab"] = {"question_id": ask.question_id, "round": ask.round_no}  # real servers ignore unknown fields
        if ask.traceparent:
            listen["traceparent"] = ask.traceparent
        return listen


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
        self.playout: asyncio.Queue[object] = asyncio.Queue()

    async def start(self) -> None:
        """Say ``listen start`` and start the microphone."""
        self.link.turn_started()
        await self.link.send_json(self.device.listen_message(self.ask))
        self.sending = asyncio.create_task(self.send())

    async def start_speaking(self) -> None:
        """A barge-in: ``listen start`` mid-answer (the server stops the old answer), then the microphone."""
        try:
            await self.link.send_json(self.device.listen_message(self.ask))
        except ChannelGone as exc:
            self.recorder.fail("disconnected", str(exc))
            return
        await self.send()

    async def stop(self) -> None:
        if self.sending is not None:
            self.sending.cancel()
            await asyncio.gather(self.sending, return_exceptions=True)

    async def send(self) -> None:
        """The microphone: each frame once its 60 ms are captured; in auto mode silence until the server hears."""
        loop = asyncio.get_running_loop()
        encoder = OpusEncoder()
        due = loop.time()
        tail = [AudioFrame(len(self.frames) + i, bytes(FRAME_BYTES)) for i in range(self.settings.tail_ms // FRAME_MS)]
        for frame in [*self.frames, *(tail if self.settings.listen_mode == "auto" else [])]:
            if frame.seq >= len(self.frames) and self.heard.is_set():
                break
            due += frame.duration_ms / 1000
            await asyncio.sleep(max(0.0, due - loop.time()))
            packet = encoder.encode(frame.pcm)
            now = self.clock.now_ns()  # handed to the transport now: the server may have it before send_audio returns
            await self.link.send_audio(packet, frame.seq * FRAME_MS)
            self.timing.uplink_frames += 1
            self.timing.last_uplink_ns = now
            if self.timing.first_uplink_ns is None:
                self.timing.first_uplink_ns = now
                self.recorder.timeline.vad.first_frame_ns = now
            if frame.seq == self.speech_end_seq:
                self.timing.speech_end_frame = frame.seq
                self.recorder.timeline.vad.user_speech_end_ns = now
        if self.settings.listen_mode == "manual":
            await self.link.send_json({"type": "listen", "state": "stop", "session_id": self.session_id})

    async def receive(self) -> None:
        """The server's messages until ``tts stop``: stamped as they arrive, audio decoded into the buffer."""
        decoder = OpusDecoder()
        held: list[AudioOut] = []
        sentence = -1
        try:
            while True:
                try:
                    message = await self.link.recv()
                except ChannelGone as exc:
                    self.recorder.fail("disconnected", str(exc))
                    raise
                now = self.clock.now_ns()
                if isinstance(message, protocol.Packet):
                    packet = message
                    if packet.kind != protocol.TYPE_OPUS:
                        self._control(protocol.parse(packet.payload), now)
                        continue
                    if self.timing.first_audio_received_ns is None:
                        self.timing.first_audio_received_ns = now
                    self.timing.last_audio_received_ns = now
                    self.timing.downlink_frames += 1
                    if self.timing.abort_ns is not None:  # cut off: still arriving, never played
                        continue
                    try:
                        pcm = decoder.decode(packet.payload)
                    except CodecError:
                        self.timing.undecodable_frames += 1
                        continue
                    frame = AudioOut(sentence_index=max(sentence, 0), seq=self.timing.downlink_frames, pcm=pcm)
                    held.append(frame)
                    if len(held) >= self.settings.jitter_frames:
                        for item in held:
                            self.playout.put_nowait(item)
                        held = []
                    continue
                kind = self._control(protocol.parse(message), now)
                if kind == "sentence_start":
                    sentence += 1
                elif kind == "stop":
                    break
        finally:
            for item in held if self.timing.abort_ns is None else []:
                self.playout.put_nowait(item)
            close(self.playout)

    def _control(self, message: dict[str, Any], now: int) -> str:
        kind, state = message["type"], message.get("state")
        if kind == "stt":
            self.timing.stt_ns = now
            self.timing.transcript = str(message.get("text", ""))
            self.heard.set()
        elif kind == "llm" and self.timing.llm_ns is None:
            self.timing.llm_ns = now
        elif kind == "tts" and state == "start":
            self.heard.set()
        elif kind == "tts" and state == "sentence_start":
            self.timing.sentence_starts.append((now, str(message.get("text", ""))))
            return "sentence_start"
        elif kind == "tts" and state == "stop":
            self.timing.tts_stop_ns = now
            return "stop"
        return str(kind)  # anything else a server sends (emotion, mcp, alert, ...) is tolerated

    async def play(self) -> None:
        async for event in self.recorder.wrap("player", Player(), drain(self.playout)):
            if isinstance(event, AudioOut) and self.timing.first_audible_ns is None and audible(event.pcm):
                # the player yields a frame once played: its sound began one frame earlier
                self.timing.first_audible_ns = self.clock.now_ns() - event.duration_ms * 1_000_000
                self.sounding.set()

    async def interrupt(self, after_ms: int, then: Ask | None) -> None:
        """Barge-in: once the answer has sounded for ``after_ms``, stop playing at once, and abort it or
        (``then``) start speaking the next question, which makes the server stop it."""
        await self.sounding.wait()
        await asyncio.sleep(max(0, after_ms - FRAME_MS) / 1000)  # it became audible one frame ago
        self.timing.abort_ns = self.clock.now_ns()
        waiting = []
        while not self.playout.empty():  # what is buffered is dropped; the frame playing now finishes
            item = self.playout.get_nowait()
            if not isinstance(item, AudioOut):
                waiting.append(item)
        for item in waiting:
            self.playout.put_nowait(item)
        if then is not None:
            self.device.barge_in(then)
            return
        await self.link.send_json({"type": "abort", "session_id": self.session_id, "reason": "wake_word_detected"})


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
    """A failed turn is aborted on the server too, and its last messages read, so the next turn starts clean."""
    with contextlib.suppress(ChannelGone, TimeoutError, ProtocolError):
        await link.send_json({"type": "abort", "session_id": session_id, "reason": "turn failed on the device"})
        async with asyncio.timeout(wait_s):
            while True:
                message = await link.recv()
                if isinstance(message, str) and protocol.parse(message).get("state") == "stop":
                    return
