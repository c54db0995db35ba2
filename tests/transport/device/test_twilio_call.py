"""A call over a real loopback WebSocket to a stand-in bot that speaks Twilio Media Streams as a Pipecat bot's
serializer does: the caller speaks the protocol in order (the bot drops nothing), keeps sending 20 ms of line
audio between questions, hears each answer through the playout buffer (sent faster than real time, played back
to back: its length exact) and echoes the bot's marks once their audio has played."""

from __future__ import annotations

import asyncio

import pytest
from websockets.asyncio.server import serve

from pipeline.clock import RealClock
from pipeline.transport.device.phone_line import CallQuestion
from pipeline.transport.device.phone_playout import NS_PER_SAMPLE
from pipeline.transport.device.twilio_call import Call, call
from tests.acoustic_synth import clip_at, of_language
from tests.transport.device.twilio_bot import ANSWER_MS, THINK_S, StandIn

pytestmark = pytest.mark.realtime


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
        assert heard is not None and heard.over and not heard.cleared and turn.speech_end_ns is not None
        # sent at once, played back to back: exactly the answer's length, from its first sample to its last
        assert heard.last_ns - heard.first_ns == (ANSWER_MS * 8 - 1) * NS_PER_SAMPLE
        # heard when it arrived (loopback and one event loop: well under a frame)
        assert 0 <= heard.first_ns - sent < 20_000_000
        # the silence the caller measured holds the stand-in's own wait for quiet and its thinking time
        assert heard.first_ns - turn.speech_end_ns >= THINK_S * 1e9
    assert bot.marks == ["answer-1", "answer-2"]  # each echoed once its audio had played
    assert bot.sequence == list(range(1, len(bot.sequence) + 1))  # numbered as Twilio numbers its messages
    assert all(not t.error for t in turns)


def test_a_bot_that_hangs_up_fails_the_turn_it_cut_and_leaves_the_rest_unasked() -> None:
    clock = RealClock()
    bot = StandIn(clock, hang_up_on_question=2)
    asked = [*questions(), *questions()[:1]]

    async def main() -> Call:
        async with serve(bot.handle, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            return await call(f"ws://127.0.0.1:{port}/media", asked, clock, answer_wait_s=5.0)

    turns = asyncio.run(main()).turns
    assert [t.question_id for t in turns] == [q.question_id for q in asked]
    first, cut, unasked = turns
    assert not first.error and first.heard is not None and first.heard.over  # kept, with its figures
    assert cut.error.startswith("the bot closed the call (") and cut.speech_end_ns is None and cut.heard is None
    assert unasked.error.startswith("not asked: the bot closed the call (") and unasked.speech_end_ns is None
