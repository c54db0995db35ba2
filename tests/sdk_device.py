"""xiaozhi-sdk 0.5.1, a third-party xiaozhi client from PyPI, driven the way a device drives its microphone.

The sdk encodes the PCM it is handed and keeps what it receives; the timing is the test's: the
microphone streams at real time, in frames of the announced duration, a fixture's speech and the
noise floor around it, for as long as the connection is open. Each of the sdk's own misbehaviours
that the interop tests meet is worked around here and named with its file and line in
xiaozhi_sdk 0.5.1.
"""

from __future__ import annotations

import asyncio
import ctypes.util
import importlib
import json
import wave
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

SAMPLE_RATE = 16000  # what the sdk must be told it gets, or it resamples (opus.py:54-57)
DOWNLINK_FRAME_MS = 60  # every server's: xs sendAudioHandle.py:16 and tts/base.py:309-311, the lab's pipeline
OPUS_MAX_FRAME_MS = 120  # the longest packet libopus decodes
NOISE_RMS = 30.0  # about -60 dBFS: a quiet room through a microphone, not digital zero
MAC = "02:00:00:00:1a:b0"  # locally administered; init_connection refuses anything but a MAC (core.py:251-253)


@cache
def sdk() -> ModuleType:
    """The sdk's package, imported without leaving its libopus hook on the whole process.

    Its import replaces ``ctypes.util.find_library`` for good so that "opus" names the libopus it
    bundles (core.py:21 calls utils/__init__.py:82-92): any module that looked libopus up later,
    the lab's opuslib_next included, would load the sdk's copy instead of the system's. The sdk's
    opuslib has loaded its library by the time the import returns, so the original is put back.
    """
    saved = ctypes.util.find_library
    try:
        return importlib.import_module("xiaozhi_sdk")
    finally:
        ctypes.util.find_library = saved


def read_pcm(path: Path) -> bytes:
    """A fixture's 16 kHz mono 16-bit PCM."""
    with wave.open(str(path), "rb") as wav:
        if (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) != (SAMPLE_RATE, 1, 2):
            raise ValueError(f"{path}: 16 kHz mono 16-bit PCM is expected")
        return wav.readframes(wav.getnframes())


@dataclass(frozen=True, slots=True)
class Heard:
    """A control message the sdk handed to its callback."""

    at: float  # the event loop's time when it arrived
    message: dict[str, Any]
    audio_frames: int  # downlink frames the sdk had decoded by then


@dataclass(slots=True)
class Answer:
    """One turn as the device saw it: ``stt``, then ``tts start`` .. ``tts stop``."""

    heard: str  # the stt text
    stt_at: float
    sentences: list[str] = field(default_factory=list)
    audio_frames: int = -1  # decoded between tts start and tts stop; -1 while not stopped
    stopped_at: float = 0.0
    _start_frames: int = -1

    @property
    def complete(self) -> bool:
        return self._start_frames >= 0 and self.audio_frames >= 0


def answers(heard: list[Heard]) -> list[Answer]:
    """The turns in what was heard, in order (a ``tts`` message with no ``stt`` before it opens none)."""
    found: list[Answer] = []
    for h in heard:
        kind, state = h.message.get("type"), h.message.get("state")
        if kind == "stt":
            found.append(Answer(str(h.message.get("text", "")), h.at))
        elif kind != "tts" or not found or found[-1].complete:
            continue
        elif state == "start" and found[-1]._start_frames < 0:
            found[-1]._start_frames = h.audio_frames
        elif state == "sentence_start":
            found[-1].sentences.append(str(h.message.get("text", "")))
        elif state == "stop" and found[-1]._start_frames >= 0:
            found[-1].audio_frames = h.audio_frames - found[-1]._start_frames
            found[-1].stopped_at = h.at
    return found


class SdkDevice:
    """One sdk client on one connection, with a microphone that never stops."""

    def __init__(self, url: str, mode: str, frame_ms: int) -> None:
        self.frame_ms = frame_ms
        self.heard: list[Heard] = []
        self.mcp: list[dict[str, Any]] = []  # the server's MCP messages, as the sdk received them
        self.client: Any = sdk().XiaoZhiWebsocket(
            self._on_message, url=url, audio_sample_rate=SAMPLE_RATE, audio_frame_duration=frame_ms
        )
        self.client.mode = mode  # what its listen start says (core.py:91-94); auto also re-listens (core.py:195)
        self._answer_mcp = self.client.mcp
        self.client.mcp = self._on_mcp  # MCP never reaches the callback (core.py:183-185): record it on the way
        self._noise = np.random.default_rng(7)
        self._next = 0.0

    async def _on_message(self, message: dict[str, Any]) -> None:
        frames = len(self.client.output_audio_queue)
        self.heard.append(Heard(asyncio.get_running_loop().time(), message, frames))

    async def _on_mcp(self, data: dict[str, Any]) -> None:
        self.mcp.append(data.get("payload", {}))
        await self._answer_mcp(data)

    async def connect(self) -> None:
        """hello, then the sdk's own ``listen start`` in its mode (core.py:225-247)."""
        if not await self.client.init_connection(MAC):
            raise AssertionError("xiaozhi-sdk could not connect (its log says why)")
        self._decode_any_packet()
        self._next = asyncio.get_running_loop().time()

    def _decode_any_packet(self) -> None:
        """Let the sdk decode every downlink packet, whatever the hello and the uplink announced.

        The sdk sizes the decoded frame from its own *uplink* frame duration (opus.py:16) and pads
        every decoded frame to that size (opus.py:70-73): with 20 ms uplink frames a 60 ms downlink
        frame makes numpy refuse a negative pad, and the frame is logged and dropped (core.py:168-173).
        It also decodes into a buffer of exactly the hello's frame_duration (opus.py:29, 76), which a
        real server copies from the device's hello (xs helloHandle.py:44-49) while sending 60 ms frames:
        a 20 ms client fails there first. Opus packets say how long they are; a decoder is handed room
        for the longest one. Both sizes are set here as a device should have them.
        """
        opus = self.client.audio_opus
        opus.xiaozhi_out_frame_size = opus.xiaozhi_out_sample_rate * OPUS_MAX_FRAME_MS // 1000
        opus.output_frame_size = opus.output_sample_rate * DOWNLINK_FRAME_MS // 1000

    async def close(self) -> None:
        await self.client.close()

    async def send_json(self, message: dict[str, Any]) -> None:
        """A control message the sdk has no call for, through its own WebSocket."""
        await self.client.websocket.send(json.dumps({"session_id": self.client.session_id, **message}))

    async def speak(self, wav: Path) -> None:
        """The fixture's speech into the microphone at real time."""
        pcm, step = read_pcm(wav), self._frame_bytes()
        for start in range(0, len(pcm), step):
            await self._send(pcm[start : start + step])

    async def wait(self, seconds: float) -> None:
        """The noise floor into the microphone for a while."""
        for _ in range(round(seconds * 1000 / self.frame_ms)):
            await self._send(self._noise_frame())

    async def wait_until(self, done: Callable[[], bool], within_s: float, what: str) -> None:
        """The noise floor into the microphone until ``done()``; AssertionError naming ``what`` after ``within_s``."""
        deadline = asyncio.get_running_loop().time() + within_s
        while not done():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"no {what} within {within_s:g} s; the device heard: {self.said()}")
            await self._send(self._noise_frame())

    def answers(self) -> list[Answer]:
        return answers(self.heard)

    def said(self) -> list[str]:
        """What the server told the device, compactly, for failure messages."""
        shown = []
        for h in self.heard:
            m = h.message
            text = f" {m['text']!r}" if "text" in m else ""
            shown.append(f"{m.get('type')}:{m.get('state', '')}{text}")
        return shown

    def audio(self) -> np.ndarray:
        """Every downlink sample the sdk decoded, in order."""
        frames = list(self.client.output_audio_queue)
        return np.concatenate([np.asarray(f).reshape(-1) for f in frames]) if frames else np.zeros(0, np.int16)

    def _frame_bytes(self) -> int:
        return SAMPLE_RATE * self.frame_ms // 1000 * 2

    def _noise_frame(self) -> bytes:
        samples = self._noise.normal(0.0, NOISE_RMS, self._frame_bytes() // 2)
        return samples.round().astype("<i2").tobytes()

    async def _send(self, pcm: bytes) -> None:
        # pcm_to_opus encodes a whole frame whatever the PCM's length (opus.py:51-60): libopus would
        # read past the end of a short last frame, which the sdk's own reader yields (utils/__init__.py:42-58)
        pcm = pcm.ljust(self._frame_bytes(), b"\0")
        loop = asyncio.get_running_loop()
        if self._next < loop.time() - self.frame_ms / 1000:  # a busy machine held us up: no catch-up burst
            self._next = loop.time()
        await asyncio.sleep(max(0.0, self._next - loop.time()))
        if not await self.client.send_audio(pcm):
            raise AssertionError(f"the connection is gone; the device heard: {self.said()}")
        self._next += self.frame_ms / 1000


@asynccontextmanager
async def connected(
    url: str, mode: str, frame_ms: int = 60, tools: list[dict[str, Any]] | None = None
) -> AsyncIterator[SdkDevice]:
    """An sdk device, connected in ``mode`` with its MCP tools registered, closed at the end."""
    device = SdkDevice(url, mode, frame_ms)
    if tools:
        await device.client.set_mcp_tool(tools)
    try:
        await device.connect()
        yield device
    finally:
        await device.close()
