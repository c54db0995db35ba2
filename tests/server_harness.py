"""One device session of the lab's server on the virtual clock: a channel the test plays the device through.

The test puts what a device would send into the channel (raw JSON as the firmware writes it, decoded at
the edge exactly as a front door decodes it; Opus packets of 60 ms PCM frames) and reads what the
session sent back, each stamped with its virtual time. No socket, no thread: times are exact.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pipeline.clock import VirtualClock, run_on_clock
from pipeline.run.turn import ServerStages
from pipeline.tracing.timeline import PacketCounts, TurnTimeline
from pipeline.transport.server.device_session import DeviceSession
from pipeline.transport.server.flood import FloodGuard
from pipeline.transport.server.requests import TurnRequest
from pipeline.transport.server.server_settings import SessionSettings
from pipeline.transport.wire.failures import ChannelGone
from pipeline.transport.wire.framing import Audio
from pipeline.transport.wire.inbound import Inbound, from_websocket
from pipeline.transport.wire.messages import Hello, Message
from pipeline.transport.wire.opus import OpusEncoder
from stages.llm.scripted import ScriptedReply
from tests.scenario import stages
from tests.wire_helpers import ToneReply, dump, hello

T = TypeVar("T")
REPLY = ScriptedReply("Fine, thank you. The weather is sunny today.")


class FakeChannel:
    """A WebSocket device's channel without the socket: what the device sends goes in, what is sent is kept."""

    transport = "websocket"

    def __init__(self, settings: SessionSettings, clock: VirtualClock) -> None:
        self.clock = clock
        self.guard = FloodGuard(settings.flood, clock)
        self.inbox: asyncio.Queue[Inbound | None] = asyncio.Queue()
        self.sent: list[tuple[int, Message | bytes]] = []  # (virtual ms, message or Opus packet)
        self.closed: tuple[int, str] | None = None
        self.closed_at = -1  # virtual ms
        self.encoder = OpusEncoder("firmware")

    async def incoming(self) -> AsyncIterator[Inbound]:
        while (item := await self.inbox.get()) is not None:
            yield item

    async def send(self, message: Message) -> None:
        self._sent(message)

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None:
        self._sent(opus)

    def _sent(self, item: Message | bytes) -> None:
        if self.closed:
            raise ChannelGone("the test's device left")
        self.sent.append(((self.clock.now_ns() - self.start_ns) // 1_000_000, item))

    async def close(self, code: int, reason: str) -> None:
        if self.closed is None:
            self.closed, self.closed_at = (code, reason), (self.clock.now_ns() - self.start_ns) // 1_000_000
            self.inbox.put_nowait(None)

    def answer_hello(self, answer: Hello) -> Hello:
        return answer

    def turn_started(self) -> None:
        pass

    def packet_counts(self) -> PacketCounts | None:
        return None

    # --- the device's side -------------------------------------------------------------

    start_ns = 0

    def say(self, message: dict[str, Any]) -> None:
        """A control message, as the firmware writes it and a front door decodes it."""
        self.inbox.put_nowait(from_websocket(1, dump(message)))

    def frame(self, pcm: bytes) -> None:
        """One 60 ms frame of audio, Opus-encoded as the firmware encodes it."""
        self.inbox.put_nowait(Audio(self.encoder.encode(pcm)))

    def leave(self) -> None:
        self.inbox.put_nowait(None)

    def messages(self, kind: str | None = None, state: str | None = None) -> list[Message]:
        """What the session said, in order; of one type (and ``state``) when asked."""
        out = [m for _, m in self.sent if not isinstance(m, bytes)]
        return [m for m in out if (kind is None or _type(m) == kind) and (state is None or _state(m) == state)]

    def audio(self) -> list[int]:
        """When (virtual ms) each Opus packet went out."""
        return [at for at, m in self.sent if isinstance(m, bytes)]


def _type(message: Message) -> str:
    return str(type(message).__struct_config__.tag)


def _state(message: Message) -> str | None:
    state = getattr(message, "state", None)
    return state if isinstance(state, str) else None


@dataclass
class Turns(ToneReply):
    """Scripted stages behind the session (the energy VAD: 600 ms of silence end-points); finished turns kept."""

    done: list[tuple[TurnRequest, TurnTimeline]] = field(default_factory=list)

    def stages(self, request: TurnRequest) -> ServerStages:
        return stages(REPLY, asr_ms=40, ttft_ms=40, per_token_ms=5, tts_first_ms=20, rtf=0.1)

    def finished(self, request: TurnRequest, timeline: TurnTimeline) -> None:
        self.done.append((request, timeline))


async def session(
    script: Coroutine[Any, Any, None], channel: FakeChannel, turns: Turns, settings: SessionSettings
) -> None:
    """Serve one session while ``script`` plays the device; the session ends when the script leaves."""
    channel.start_ns = channel.clock.now_ns()
    served = asyncio.create_task(DeviceSession(channel, settings, turns, channel.clock).serve())
    try:
        await script
    finally:
        channel.leave()
        with contextlib.suppress(asyncio.CancelledError):
            await served


def virtual(coro: Coroutine[Any, Any, T]) -> T:
    return run_on_clock(coro, VirtualClock())


def say_hello(channel: FakeChannel, **extra: Any) -> None:
    channel.say(hello(**extra))
