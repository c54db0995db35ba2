"""A stand-in bot that speaks Twilio Media Streams as a Pipecat bot's serializer does: it waits for the caller's
speech and then for quiet, thinks, and answers with a tone sent all at once (as a TTS streams faster than real
time), a mark after it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from websockets.asyncio.server import ServerConnection, serve

from pipeline.clock import RealClock
from pipeline.transport.wire import g711
from pipeline.transport.wire import twilio as tw
from pipeline.transport.wire.twilio_order import FromCaller

ANSWER_MS = 600
THINK_S = 0.2
QUIET_FRAMES = 15  # 300 ms of line silence after speech: the stand-in's end of turn


@dataclass
class StandIn:
    """What the stand-in bot saw and did."""

    clock: RealClock
    side: FromCaller = field(default_factory=FromCaller)  # the latest call's (each call has its own)
    events: list[str] = field(default_factory=list)
    answered_ns: list[int] = field(default_factory=list)  # when each answer's first chunk was sent
    marks: list[str] = field(default_factory=list)  # echoed back to it
    sequence: list[int] = field(default_factory=list)  # every message's sequenceNumber, after connected
    hang_up_on_question: int = 0  # close the call when this question (1, 2...) begins to be said; 0: never

    async def handle(self, ws: ServerConnection) -> None:
        spoke, quiet = False, 0
        self.side = side = FromCaller()
        async for data in ws:
            item = side.take(tw.read(data))
            if item is None:
                continue
            self.events.append(type(item).__name__)
            number = item.sequence if isinstance(item, tw.Sound) else getattr(item, "sequence_number", None)
            if number is not None:
                self.sequence.append(int(number))
            if isinstance(item, tw.MarkEvent):
                self.marks.append(item.mark.name)
            if not isinstance(item, tw.Sound):
                continue
            loud = int(np.abs(g711.decode(item.ulaw).astype(np.int32)).max()) > 500
            if loud and not spoke and len(self.answered_ns) + 1 == self.hang_up_on_question:
                await ws.close()
                return
            spoke, quiet = (True, 0) if loud else (spoke, quiet + spoke)
            if spoke and quiet == QUIET_FRAMES:
                spoke = False
                await asyncio.sleep(THINK_S)
                await self.answer(ws, side, f"answer-{len(self.answered_ns) + 1}")

    async def answer(self, ws: ServerConnection, side: FromCaller, mark: str) -> None:
        """A tone, all of it at once (as a TTS streams faster than real time), then a mark after it."""
        t = np.arange(ANSWER_MS * 8) / 8000
        tone = g711.encode((4000 * np.cos(2 * np.pi * 440 * t)).astype(np.int16))  # its first and last sample loud
        assert side.stream_sid is not None
        self.answered_ns.append(self.clock.now_ns())
        for i in range(0, len(tone), 320):
            await ws.send(tw.encode(tw.media(side.stream_sid, tone[i : i + 320])))
        await ws.send(tw.encode(tw.MarkEvent(tw.MarkBody(mark), side.stream_sid)))


class Bot(Protocol):
    """A stand-in bot: it handles each connection."""

    async def handle(self, ws: ServerConnection) -> None: ...


@contextmanager
def bot_in_thread(bot: Bot) -> Iterator[int]:
    """``bot`` served on loopback from its own thread and event loop (for a caller that runs its own); its port."""
    loop = asyncio.new_event_loop()
    ready: asyncio.Future[int] = loop.create_future()
    done = asyncio.Event()

    async def main() -> None:
        async with serve(bot.handle, "127.0.0.1", 0) as server:
            ready.set_result(server.sockets[0].getsockname()[1])
            await done.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        yield asyncio.run_coroutine_threadsafe(_wait(ready), loop).result(timeout=10)
    finally:
        loop.call_soon_threadsafe(done.set)
        thread.join(timeout=10)
        loop.close()


async def _wait(ready: asyncio.Future[int]) -> int:
    return await ready
