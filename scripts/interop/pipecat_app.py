# mypy: disallow-subclassing-any=False, disallow-untyped-decorators=False, warn-return-any=False
"""A Pipecat voice bot, as Pipecat's own telephony examples build one, for the lab to call and measure.

    PIPECAT_VENV/bin/python scripts/interop/pipecat_app.py --port 8765 --base-url http://127.0.0.1:PORT/v1 \\
        --events DIR/bot-events.jsonl

Run by ``scripts/interop/pipecat_bot.py`` in Pipecat's own environment (pipecat-ai from PyPI, never the lab's venv):
FastAPI serves two WebSockets, one for each wire Pipecat speaks. At ``/media`` each connection is a phone call, told
apart by Twilio's ``start`` (``parse_telephony_websocket``) and carried by Pipecat's ``TwilioFrameSerializer`` with
its hang-up off (no call to Twilio's API is ever made), 8 kHz. At ``/ws`` it is Pipecat's own wire, its
``ProtobufFrameSerializer``, 16 kHz, with the RTVI messages Pipecat sends by default. The pipeline is Pipecat's
usual one: the transport's input, OpenAI-compatible STT, the user aggregator with Silero VAD and Smart Turn v3
(Pipecat's default end of turn), the LLM, the TTS, the transport's output, the assistant aggregator. Every service's
``base_url`` is ``--base-url``: the lab's speech services, whose relay times the LLM.

What the framework believed happened goes to ``--events`` as JSON lines (wall-clock ns, the call's stream id, the
frame's name): the user started and stopped speaking, the transcription, the LLM's response starting, the bot
started and stopped speaking; and once a second the event loop's worst lag over that second (``loop_lag``,
``lag_ms``: how much later than asked a 50 ms sleep woke), the loop every call of the bot shares. The lab reads them
beside what its caller heard (``pipeline.interop.bot_marks``). Only this file imports Pipecat; nothing of the lab is
imported here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

import uvicorn
from fastapi import FastAPI, WebSocket
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    LLMFullResponseStartFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.runner.utils import parse_telephony_websocket
from pipecat.serializers.protobuf import ProtobufFrameSerializer
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.services.openai.stt import OpenAISTTService
from pipecat.services.openai.tts import OpenAITTSService
from pipecat.transcriptions.language import Language
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams, FastAPIWebsocketTransport
from pipecat.workers.runner import WorkerRunner

TRACKED = {
    UserStartedSpeakingFrame: "user_started_speaking",
    UserStoppedSpeakingFrame: "user_stopped_speaking",
    TranscriptionFrame: "transcription",
    LLMFullResponseStartFrame: "llm_response_started",
    BotStartedSpeakingFrame: "bot_started_speaking",
    BotStoppedSpeakingFrame: "bot_stopped_speaking",
}
SYSTEM = "You are a helpful voice assistant. Answer in one or two short sentences."
TTS_RATE = 24000  # what OpenAI's pcm response is; the lab's speech service answers it as OpenAI does


class Marks(BaseObserver):
    """Each tracked frame, the first time it is pushed, as a line of ``out``."""

    def __init__(self, out: TextIO, stream: str) -> None:
        super().__init__()
        self.out, self.stream = out, stream

    async def on_push_frame(self, data: FramePushed) -> None:
        name = TRACKED.get(type(data.frame))
        # a frame broadcast both ways is two frames: the downstream one, at its first push, is the mark
        if name is None or not data.first_push or data.direction != FrameDirection.DOWNSTREAM:
            return
        line: dict[str, Any] = {"t_ns": time.time_ns(), "stream": self.stream, "event": name}
        if isinstance(data.frame, TranscriptionFrame):
            line["text"] = data.frame.text
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()


LAG_PERIOD_S = 0.05  # the probe's sleep: the loop's lag is how much later than this it wakes
LAG_WINDOW_S = 1.0  # one line a window: its worst lag


async def loop_lag(out: TextIO) -> None:
    """The event loop's worst lag each second, as a line of ``out``, for as long as the bot runs."""
    loop = asyncio.get_running_loop()
    while True:
        worst, until = 0.0, loop.time() + LAG_WINDOW_S
        while loop.time() < until:
            asked = loop.time()
            await asyncio.sleep(LAG_PERIOD_S)
            worst = max(worst, loop.time() - asked - LAG_PERIOD_S)
        line = {"t_ns": time.time_ns(), "stream": "", "event": "loop_lag", "lag_ms": round(worst * 1000, 3)}
        out.write(json.dumps(line) + "\n")
        out.flush()


def services(base_url: str, language: str) -> tuple[OpenAISTTService, OpenAILLMService, OpenAITTSService]:
    """STT, LLM and TTS, all OpenAI-compatible, all at ``base_url``; the STT told the calls' one language (Pipecat's
    OpenAI STT sends one with every request, English unless told)."""
    key = "lab-loopback"  # the lab's services take any key; none of OpenAI's is ever used
    stt = OpenAISTTService(api_key=key, base_url=base_url, model="whisper-1", language=Language(language))
    llm = OpenAILLMService(api_key=key, base_url=base_url, model="lab")
    tts = OpenAITTSService(api_key=key, base_url=base_url, model="tts-1", voice="alloy", sample_rate=TTS_RATE)
    return stt, llm, tts


def app(base_url: str, language: str, events: TextIO) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_web: FastAPI) -> AsyncIterator[None]:
        probe = asyncio.create_task(loop_lag(events))
        yield
        probe.cancel()

    web = FastAPI(lifespan=lifespan)

    @web.websocket("/media")
    async def media(websocket: WebSocket) -> None:
        await websocket.accept()
        _kind, call = await parse_telephony_websocket(websocket)
        stream = str(call["stream_id"])
        serializer = TwilioFrameSerializer(
            stream_sid=stream,
            call_sid=str(call["call_id"]),
            params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
        )
        await converse(websocket, serializer, stream, 8000)

    @web.websocket("/ws")
    async def frames(websocket: WebSocket) -> None:
        await websocket.accept()
        await converse(websocket, ProtobufFrameSerializer(), f"ws-{id(websocket):x}-{time.time_ns()}", 16000)

    async def converse(websocket: WebSocket, serializer: Any, stream: str, rate: int) -> None:
        """One call: Pipecat's usual pipeline on this connection, until the caller leaves."""
        params = FastAPIWebsocketParams(audio_in_enabled=True, audio_out_enabled=True, serializer=serializer)
        transport = FastAPIWebsocketTransport(websocket=websocket, params=params)
        stt, llm, tts = services(base_url, language)
        context = LLMContext([{"role": "system", "content": SYSTEM}])
        # the VAD goes to the user aggregator: FastAPIWebsocketParams takes no vad_analyzer in Pipecat 1.14
        pair = LLMContextAggregatorPair(context, user_params=LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer()))
        pipeline = Pipeline([transport.input(), stt, pair.user(), llm, tts, transport.output(), pair.assistant()])
        worker = PipelineWorker(
            pipeline,
            params=PipelineParams(audio_in_sample_rate=rate, audio_out_sample_rate=rate),
            observers=[Marks(events, stream)],
        )

        @transport.event_handler("on_client_disconnected")
        async def gone(_transport: Any, _client: Any) -> None:
            await worker.cancel()

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        await runner.run()

    return web


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--base-url", required=True, help="the lab's speech services, e.g. http://127.0.0.1:18100/v1")
    p.add_argument("--events", type=Path, required=True, help="the framework's marks, as JSON lines")
    p.add_argument("--language", default="en", help="the callers' language, for the STT (default en)")
    args = p.parse_args()
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")  # onnxruntime asks a Microsoft host otherwise
    with args.events.open("a", encoding="utf-8") as events:
        print(f"pipecat bot listening on ws://{args.host}:{args.port}/media and /ws", flush=True)
        uvicorn.run(app(args.base_url, args.language, events), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
