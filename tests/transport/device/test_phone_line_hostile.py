"""A hostile bot cannot stall the caller or grow its memory, on either wire: what does not read, what comes from
another stream or out of turn, a flood of marks and audio far faster than a phone plays are dropped and counted;
a message over the bound closes the call, and the turn says so. Over real loopback WebSockets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import numpy as np
import pytest
from websockets.asyncio.server import ServerConnection, serve

from pipeline.clock import RealClock
from pipeline.transport.device import phone_line
from pipeline.transport.device.phone_line import CallQuestion, CallTurn, Line
from pipeline.transport.device.pipecat_call import PipecatLine
from pipeline.transport.device.twilio_call import TwilioLine
from pipeline.transport.wire import g711
from pipeline.transport.wire import pipecat_frames as pf
from pipeline.transport.wire import twilio as tw

pytestmark = pytest.mark.realtime

Attack = Callable[[ServerConnection, str], Awaitable[None]]
LOUD = g711.encode(np.full(8000, 4000, dtype=np.int16))  # a second of loud audio, mu-law


async def twilio_junk(ws: ServerConnection, stream: str) -> None:
    """Everything a Twilio bot must not send, then a flood of audio and of marks."""
    await ws.send("not json")
    await ws.send(json.dumps({"event": "media", "streamSid": stream, "media": {"payload": "%%%"}}))
    await ws.send(tw.encode(tw.media("MZ-someone-else", LOUD[:160])))
    await ws.send(tw.encode(tw.StartEvent(tw.StartInfo(stream), stream)))  # the caller's event, from the bot
    await ws.send(json.dumps({"event": "x" * 5000}))  # unknown events, however named, one counter
    for _ in range(12):  # twelve seconds of answer at once, where the caller keeps at most 3 queued
        await ws.send(tw.encode(tw.media(stream, LOUD)))
    for i in range(phone_line.MOST_MARKS + 50):  # each due once that audio has played: all waiting at once
        await ws.send(tw.encode(tw.MarkEvent(tw.MarkBody(f"m{i}"), stream)))


async def pipecat_junk(ws: ServerConnection, _stream: str) -> None:
    await ws.send("text where frames are binary")
    await ws.send(b"\xff\xff\xff")
    await ws.send(pf.audio(b"\x00\x00", 11025))
    marked = pf.message("bot-started-speaking")
    for _ in range(phone_line.MOST_MARKS + 50):
        await ws.send(marked)
    loud = np.full(16000, 4000, dtype="<i2").tobytes()
    for _ in range(12):
        await ws.send(pf.audio(loud, 16000))


async def oversized(ws: ServerConnection, stream: str) -> None:
    await ws.send("x" * (2 * tw.MOST_CHARS + 1) if stream else b"\x00" * (pf.MOST_BYTES + 2048))


def run(line: Line, attack: Attack) -> tuple[CallTurn, Line]:
    async def bot(ws: ServerConnection) -> None:
        stream = ""
        async for data in ws:
            if isinstance(data, str) and '"start"' in data:
                stream = json.loads(data)["streamSid"]
            if isinstance(data, bytes) or stream:  # the caller is on: attack once, then keep reading
                await attack(ws, stream)
                async for _ in ws:
                    pass
                return

    async def main() -> tuple[CallTurn, Line]:
        async with serve(bot, "127.0.0.1", 0, max_size=None) as server:
            port = server.sockets[0].getsockname()[1]
            line.url = f"ws://127.0.0.1:{port}/"
            async with line:
                silence = np.zeros(line.rate // 5, dtype=np.int16)  # 200 ms said: the attack is the answer
                turn = await asyncio.wait_for(line.ask(CallQuestion("q", silence, 0.0), 5_000_000_000), 60)
            return turn, line

    return asyncio.run(main())


@pytest.mark.parametrize(("kind", "attack"), [(TwilioLine, twilio_junk), (PipecatLine, pipecat_junk)])
def test_junk_and_floods_are_dropped_and_counted(
    kind: type[Line], attack: Attack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(phone_line, "MOST_QUEUED_S", 3)
    turn, line = run(kind("", RealClock()), attack)
    assert turn.error == "" and turn.heard is not None  # the call went on: what was kept was heard
    dropped = dict(line.dropped)
    assert dropped.get("playout_full", 0) >= 8  # 12 s sent at once, about 3 s kept (one chunk may pass the bound)
    assert line.playout.free_ns - line.playout.chunks[0].start_ns <= 5_000_000_000
    if kind is TwilioLine:
        assert dropped["too_many_marks"] == 50 and len(line.playout.marks) <= phone_line.MOST_MARKS
        kinds = {
            "malformed JSON",
            "a media payload that is not base64",
            "media of another stream",
            "start from the bot",
        }
        assert kinds <= set(dropped), dropped
        assert dropped["an unknown event from the bot"] == 1
    else:
        assert dropped["too_many_marks"] == 50 and len(turn.marks) == phone_line.MOST_MARKS
        assert {"text_message", "bad_protobuf", "bad_audio"} <= set(dropped)


@pytest.mark.parametrize("kind", [TwilioLine, PipecatLine])
def test_a_message_over_the_bound_closes_the_call_and_the_turn_says_so(kind: type[Line]) -> None:
    turn, line = run(kind("", RealClock()), oversized)
    assert line.gone is not None and turn.error.startswith("the bot closed the call (")
