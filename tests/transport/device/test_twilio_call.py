"""A call over a real loopback WebSocket to a stand-in bot that speaks Twilio Media Streams as a Pipecat bot's
serializer does: the caller speaks the protocol in order (the bot drops nothing), keeps sending 20 ms of line
audio between questions, hears each answer through the playout buffer (sent faster than real time, played back
to back: its length exact) and echoes the bot's marks once their audio has played."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np
import pytest
from websockets.asyncio.server import ServerConnection, serve

from pipeline.clock import RealClock
from pipeline.transport.device.phone_playout import NS_PER_SAMPLE
from pipeline.transport.device.twilio_call import Call, CallQuestion, call
from pipeline.transport.wire import g711
from pipeline.transport.wire import twilio as tw
from pipeline.transport.wire.twilio_order import FromCaller
from tests.acoustic_synth import clip_at, of_language

pytestmark = pytest.mark.realtime

ANSWER_MS = 600
THINK_S = 0.2
QUIET_FRAMES = 15  # 300 ms of line silence after speech: the stand-in's end of turn


@dataclass
class StandIn:
    """What the stand-in bot saw and did."""

    clock: RealClock
    side: FromCaller = field(default_factory=FromCaller)
    events: list[str] = field(default_factory=list)
    answered_ns: list[int] = field(default_factory=list)  # when each answer's first chunk was sent
    marks: list[str] = field(default_factory=list)  # echoed back to it

    async def handle(self, ws: ServerConnection) -> None:
        spoke, quiet = False, 0
        async for data in ws:
            item = self.side.take(tw.read(data))
            if item is None:
                continue
            self.events.append(type(item).__name__)
            if isinstance(item, tw.MarkEvent):
                self.marks.append(item.mark.name)
            if not isinstance(item, tw.Sound):
                continue
            loud = int(np.abs(g711.decode(item.ulaw).astype(np.int32)).max()) > 500
            spoke, quiet = (True, 0) if loud else (spoke, quiet + spoke)
            if spoke and quiet == QUIET_FRAMES:
                spoke = False
                await asyncio.sleep(THINK_S)
                await self.answer(ws, f"answer-{len(self.answered_ns) + 1}")

    async def answer(self, ws: ServerConnection, mark: str) -> None:
        """A tone, all of it at once (as a TTS streams faster than real time), then a mark after it."""
        t = np.arange(ANSWER_MS * 8) / 8000
        tone = g711.encode((4000 * np.cos(2 * np.pi * 440 * t)).astype(np.int16))  # its first and last sample loud
        assert self.side.stream_sid is not None
        self.answered_ns.append(self.clock.now_ns())
        for i in range(0, len(tone), 320):
            await ws.send(tw.encode(tw.media(self.side.stream_sid, tone[i : i + 320])))
        await ws.send(tw.encode(tw.MarkEvent(tw.MarkBody(mark), self.side.stream_sid)))


def questions() -> list[CallQuestion]:
    return [CallQuestion(q.question_id, clip_at(q, 8000), q.speech_end_s * 1000) for q in of_language("en", 2)]


def test_a_call_to_a_twilio_bot_hears_each_answer_as_a_phone_plays_it() -> None:
    clock = RealClock()
    bot = StandIn(clock)

    async def main() -> Call:
        async with serve(bot.handle, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            return await call(f"ws://127.0.0.1:{port}/media", questions(), clock, answer_wait_s=5.0)

    result = asyncio.run(main())
    assert bot.side.dropped == {} and bot.side.ended  # the protocol in order, to the stop
    assert bot.events[:2] == ["ConnectedEvent", "StartEvent"] and bot.events[-1] == "StopEvent"
    assert result.dropped == {}
    turns = result.turns
    assert [t.question_id for t in turns] == [q.question_id for q in questions()]
    for turn, sent in zip(turns, bot.answered_ns, strict=True):
        heard = turn.heard
        assert heard is not None and heard.over and not heard.cleared
        # sent at once, played back to back: exactly the answer's length, from its first sample to its last
        assert heard.last_ns - heard.first_ns == (ANSWER_MS * 8 - 1) * NS_PER_SAMPLE
        # heard when it arrived (loopback and one event loop: well under a frame)
        assert 0 <= heard.first_ns - sent < 20_000_000
        # the silence the caller measured holds the stand-in's own wait for quiet and its thinking time
        assert heard.first_ns - turn.speech_end_ns >= THINK_S * 1e9
    assert bot.marks == ["answer-1", "answer-2"]  # each echoed once its audio had played
