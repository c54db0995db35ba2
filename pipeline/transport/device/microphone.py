"""What the emulated device's microphone picks up: the question's clip, and its own noise floor otherwise.

The firmware streams its microphone, never digital zero; in realtime mode it streams for the whole
connection (application.cc keeps the audio processor running), each question announced to a server of
the lab's by a ``lab`` message. What it sends is pre-encoded (``uplink``) and paced by the loop's
shared ``pacer``, so that one process holds a fleet of them; each send's lateness is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Protocol

from pipeline.clock import Clock
from pipeline.events import FRAME_MS, AudioFrame
from pipeline.run.device_side import Ask
from pipeline.transport.device.device_recording import AudioRecording
from pipeline.transport.device.device_settings import DeviceSettings
from pipeline.transport.device.link import DeviceLink
from pipeline.transport.device.pacer import Capture, pacer, send_lateness
from pipeline.transport.device.uplink_packets import NOISE_FLOOR_DBFS, NoiseFloor, NoiseLoop, clip_packets
from pipeline.transport.wire.failures import ChannelGone
from pipeline.transport.wire.messages import Lab

__all__ = ["NOISE_FLOOR_DBFS", "Microphone", "NoiseFloor", "SpokenTurn", "lab_message"]


class SpokenTurn(Protocol):
    """A turn whose question the microphone speaks: its clip, where the microphone is in it, what went out."""

    ask: Ask
    frames: Sequence[AudioFrame]
    mic_pos: int

    def sent(self, frame: AudioFrame | None, now: int, captured: int) -> None: ...


def lab_message(ask: Ask, session_id: str) -> Lab:
    """Realtime mode: the question about to be spoken, for a server of ours (real ones ignore the type)."""
    return Lab(
        question_id=ask.question_id, round=ask.round_no, traceparent=ask.traceparent or None, session_id=session_id
    )


class Microphone:
    """Realtime mode: the microphone streams for the whole connection, one frame per 60 ms: the asked
    question's clip, the noise floor otherwise (application.cc keeps the audio processor running)."""

    def __init__(
        self,
        link: DeviceLink,
        settings: DeviceSettings,
        noise: NoiseLoop,
        clock: Clock,
        recording: AudioRecording | None = None,
    ) -> None:
        self.link, self.settings, self.noise, self.clock = link, settings, noise, clock
        self.recording = recording  # ``--record-audio``: every frame sent, the noise floor's too
        self.turn: SpokenTurn | None = None  # whose question is spoken, and whose frames these are
        noise.ready()
        self.task = asyncio.create_task(self._run())

    def ask(self, turn: SpokenTurn) -> None:
        turn.mic_pos = 0
        self.turn = turn

    def release(self, turn: SpokenTurn) -> None:
        if self.turn is turn:
            self.turn = None

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    async def _run(self) -> None:
        paced, late, capture = pacer(), send_lateness(), Capture()
        due, position = paced.start_us(), 0
        clip: tuple[bytes, ...] = ()
        with contextlib.suppress(ChannelGone):  # the connection is gone: so is its microphone
            while True:
                due += FRAME_MS * 1000
                await paced.wait(due)
                turn, spoken = self.turn, None
                if turn is not None and turn.mic_pos < len(turn.frames):
                    if turn.mic_pos == 0:
                        await self.link.send(lab_message(turn.ask, self.link.session_id))
                        clip = clip_packets(turn.frames, self.settings.encoder_preset)
                    spoken = turn.frames[turn.mic_pos]
                    packet, pcm = clip[turn.mic_pos], spoken.pcm
                    turn.mic_pos += 1
                else:
                    packet = self.noise.next()
                    pcm = self.noise.last_pcm() if self.recording is not None else b""
                lateness = paced.late_ms(due)
                late.record(lateness)
                now = self.clock.now_ns()
                captured = capture.at(now, due, lateness)
                await self.link.send_audio(packet, position * FRAME_MS)
                position += 1
                if turn is not None:
                    turn.sent(spoken, now, captured)
                if self.recording is not None:
                    self.recording.microphone(pcm, captured)
