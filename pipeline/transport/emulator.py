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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.clock import Clock
from pipeline.endpoints.link.profiles import NetProfile
from pipeline.events import FRAME_BYTES, FRAME_MS, AudioFrame, AudioOut
from pipeline.run.device import Player, close, drain
from pipeline.run.recorder import TurnRecorder
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
    barge_in_after_ms: int | None = None  # the user cuts in: abort this long after the answer became audible
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

    @property
    def session_id(self) -> str:
        return self.link.session_id

    async def __aenter__(self) -> EmulatedDevice:
        await self.link.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.link.close()

    async def turn(
        self,
        frames: Sequence[AudioFrame],
        speech_end_ms: int | None,
        question_id: str,
        round_no: int,
        traceparent: str = "",
    ) -> TurnTimeline:
        """Ask one question; the device's timeline of it, failures recorded on it (M7).

        ``traceparent`` (W3C) goes with ``listen``: a server of ours makes its spans children of it."""
        recorder = TurnRecorder(self.clock)
        tl = recorder.timeline
        tl.device = DeviceTiming(transport=self.link.transport, protocol_version=self.settings.protocol_version)
        if not self.link.is_open:
            recorder.fail("disconnected", "the connection to the server is gone")
            return recorder.finish()
        turn = _DeviceTurn(self, recorder, frames, speech_end_ms)
        listen: dict[str, Any] = {
            "type": "listen",
            "state": "start",
            "mode": self.settings.listen_mode,
            "session_id": self.session_id,
        }
        listen["lab"] = {"question_id": question_id, "round": round_no}  # real servers ignore unknown fields
        if traceparent:
            listen["traceparent"] = traceparent
        self.link.turn_started()
        try:
            await self.link.send_json(listen)
        except ChannelGone as exc:
            recorder.fail("disconnected", str(exc))
            return recorder.finish()
        others = [asyncio.create_task(turn.send())]
        if self.settings.barge_in_after_ms is not None:
            others.append(asyncio.create_task(turn.interrupt(self.settings.barge_in_after_ms)))
        work = [asyncio.create_task(turn.receive()), asyncio.create_task(turn.play())]
        await supervise(recorder, work, others, self.settings.turn_timeout_s)
        tl.packets = self.link.packet_counts()
        _check(recorder)
        if not tl.ok and self.link.is_open:
            await _abandon(self.link, self.session_id)
        return recorder.finish()


class _DeviceTurn:
    def __init__(
        self, device: EmulatedDevice, recorder: TurnRecorder, frames: Sequence[AudioFrame], speech_end_ms: int | None
    ) -> None:
        assert recorder.timeline.device is not None
        self.link, self.settings, self.session_id = device.link, device.settings, device.session_id
        self.clock, self.recorder = device.clock, recorder
        self.timing: DeviceTiming = recorder.timeline.device
        self.frames = frames
        # the frame that holds the last speech; no speech found: the clip's last frame
        end = speech_end_ms if speech_end_ms is not None else len(frames) * FRAME_MS
        self.speech_end_seq = min(max(0, (end - 1) // FRAME_MS), max(0, len(frames) - 1))
        self.heard = asyncio.Event()
        self.sounding = asyncio.Event()  # the answer became audible
        self.playout: asyncio.Queue[object] = asyncio.Queue()

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
            await self.link.send_audio(encoder.encode(frame.pcm), frame.seq * FRAME_MS)
            now = self.clock.now_ns()
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

    async def interrupt(self, after_ms: int) -> None:
        """Barge-in: once the answer has sounded for ``after_ms``, abort it and stop playing at once."""
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
