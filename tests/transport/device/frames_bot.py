"""A stand-in bot on Pipecat's protobuf wire, as a Pipecat bot's ``ProtobufFrameSerializer`` and RTVI speak it: it
waits for the caller's speech and then for quiet, says what Pipecat says of the turn (the user stopped, the final
transcription, the LLM started, the bot started speaking), and answers with a 24 kHz tone sent all at once, then
says it stopped speaking."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np
from websockets.asyncio.server import ServerConnection

from pipeline.clock import RealClock
from pipeline.transport.wire import pipecat_frames as pf

ANSWER_MS = 600
THINK_S = 0.2
QUIET_FRAMES = 15  # 300 ms of the caller's silence after speech: the stand-in's end of turn
RATE = 24000
SAID = ("user-stopped-speaking", "user-transcription", "bot-llm-started", "bot-tts-text", "bot-started-speaking")


@dataclass
class FramesStandIn:
    """What the stand-in saw and did."""

    clock: RealClock
    ready: list[str] = field(default_factory=list)  # the client messages it was sent (client-ready)
    rates: set[int] = field(default_factory=set)  # the caller's audio rates
    answered_ns: list[int] = field(default_factory=list)  # when each answer's first frame was sent

    async def handle(self, ws: ServerConnection) -> None:
        spoke, quiet = False, 0
        async for data in ws:
            item = pf.read(data)
            if isinstance(item, pf.RtviEvent):
                self.ready.append(item.kind)
            if not isinstance(item, pf.BotAudio):
                continue
            self.rates.add(item.rate)
            loud = int(np.abs(item.pcm.astype(np.int32)).max()) > 500
            spoke, quiet = (True, 0) if loud else (spoke, quiet + spoke)
            if spoke and quiet == QUIET_FRAMES:
                spoke = False
                await asyncio.sleep(THINK_S)
                await self.answer(ws)

    async def answer(self, ws: ServerConnection) -> None:
        n = len(self.answered_ns) + 1
        await ws.send(pf.message("user-stopped-speaking"))
        await ws.send(pf.message("user-transcription", {"text": "not yet", "final": False}))
        await ws.send(pf.message("user-transcription", {"text": f"question {n}", "final": True}))
        await ws.send(pf.message("bot-llm-started"))
        await ws.send(pf.message("bot-tts-text", {"text": f"answer {n}"}))
        await ws.send(pf.message("bot-audio-level", {"value": 0.5}))  # many a second: no mark
        t = np.arange(ANSWER_MS * RATE // 1000) / RATE
        tone = (4000 * np.cos(2 * np.pi * 440 * t)).astype("<i2")  # its first and last sample loud
        self.answered_ns.append(self.clock.now_ns())
        await ws.send(pf.message("bot-started-speaking"))
        for i in range(0, len(tone), 960):
            await ws.send(pf.audio(tone[i : i + 960].tobytes(), RATE))
        await ws.send(pf.message("bot-stopped-speaking"))
