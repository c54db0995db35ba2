"""What the emulated device's microphone picks up: the question's clip, and its own noise floor otherwise.

The firmware streams its microphone, never digital zero; in realtime mode it streams for the whole
connection (application.cc keeps the audio processor running), each question announced to a server of
the lab's by a ``lab`` message.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from pipeline.clock import Clock
from pipeline.events import FRAME_MS, FRAME_SAMPLES, AudioFrame
from pipeline.run.device import Ask
from pipeline.transport.device.link import DeviceLink
from pipeline.transport.device.pacer import send_lateness
from pipeline.transport.device.settings import DeviceSettings
from pipeline.transport.wire.errors import ChannelGone
from pipeline.transport.wire.messages import Lab
from pipeline.transport.wire.opus import OpusEncoder

# The microphone's own noise when nobody speaks: the firmware streams its microphone, never digital zero.
NOISE_FLOOR_DBFS = -60.0


class Speaker(Protocol):
    """A turn whose question the microphone speaks: its clip, where the microphone is in it, what went out."""

    ask: Ask
    frames: Sequence[AudioFrame]
    mic_pos: int

    def sent(self, frame: AudioFrame | None, now: int) -> None: ...


def lab_message(ask: Ask, session_id: str) -> Lab:
    """Realtime mode: the question about to be spoken, for a server of ours (real ones ignore the type)."""
    return Lab(
        question_id=ask.question_id, round=ask.round_no, traceparent=ask.traceparent or None, session_id=session_id
    )


class NoiseFloor:
    """Low-level Gaussian noise at NOISE_FLOOR_DBFS (RMS), seeded so that runs repeat."""

    def __init__(self, seed: str) -> None:
        self._rng = np.random.default_rng(zlib.crc32(seed.encode()))
        self._sigma = 32767 * 10 ** (NOISE_FLOOR_DBFS / 20)

    def frame(self) -> bytes:
        samples = np.rint(self._rng.normal(0.0, self._sigma, FRAME_SAMPLES))
        return np.clip(samples, -32768, 32767).astype("<i2").tobytes()


class Microphone:
    """Realtime mode: the microphone streams for the whole connection, one frame per 60 ms: the asked
    question's clip, the noise floor otherwise (application.cc keeps the audio processor running)."""

    def __init__(self, link: DeviceLink, settings: DeviceSettings, noise: NoiseFloor, clock: Clock) -> None:
        self.link, self.settings, self.noise, self.clock = link, settings, noise, clock
        self.turn: Speaker | None = None  # whose question is spoken, and whose frames these are
        self.task = asyncio.create_task(self._run())

    def ask(self, turn: Speaker) -> None:
        turn.mic_pos = 0
        self.turn = turn

    def release(self, turn: Speaker) -> None:
        if self.turn is turn:
            self.turn = None

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        encoder = OpusEncoder(preset=self.settings.encoder_preset)
        due, position = loop.time(), 0
        late = send_lateness()
        with contextlib.suppress(ChannelGone):  # the connection is gone: so is its microphone
            while True:
                due += FRAME_MS / 1000
                await asyncio.sleep(max(0.0, due - loop.time()))
                turn, spoken = self.turn, None
                if turn is not None and turn.mic_pos < len(turn.frames):
                    if turn.mic_pos == 0:
                        await self.link.send(lab_message(turn.ask, self.link.session_id))
                    spoken = turn.frames[turn.mic_pos]
                    turn.mic_pos += 1
                packet = encoder.encode(spoken.pcm if spoken is not None else self.noise.frame())
                late.record((loop.time() - due) * 1000)
                now = self.clock.now_ns()
                await self.link.send_audio(packet, position * FRAME_MS)
                position += 1
                if turn is not None:
                    turn.sent(spoken, now)
