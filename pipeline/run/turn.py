"""One voice turn: device audio -> VAD -> ASR -> LLM -> sentences -> TTS -> device playback.

Stages run as concurrent tasks joined by queues, so TTS of a finished sentence
proceeds while the LLM is still generating the next one. Every stage is wrapped
by the recorder, the only code that reads the clock. A turn that runs past its
time limit is cancelled and recorded as ``timeout``; any other failure is
recorded with its exception class. Nothing is skipped (METHOD M7).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from pipeline.clock import Clock
from pipeline.events import AudioFrame, Event, Stage, TurnEnd
from pipeline.run.device import InProcessLink, Link, Player, close, drain, stream_audio
from pipeline.run.recorder import TurnRecorder
from pipeline.tracing.timeline import TurnTimeline


@dataclass(frozen=True, slots=True)
class ServerStages:
    vad: Stage
    asr: Stage
    llm: Stage
    sentences: Stage
    tts: Stage


SERVER_ROLES = ("vad", "asr", "llm", "sentences", "tts")


async def _pump(source: AsyncIterator[Event], queue: asyncio.Queue[object]) -> None:
    try:
        async for event in source:
            queue.put_nowait(event)
    finally:
        close(queue)


async def serve_turn(stages: ServerStages, recorder: TurnRecorder, link: Link) -> None:
    """The server side: chain the stages, each in its own task, and send the audio down."""
    received: asyncio.Queue[object] = asyncio.Queue()
    # audio keeps arriving after the end-point; the turn does not wait for the device to stop
    receiver = asyncio.create_task(_pump(recorder.receive(link.uplink()), received))
    source: AsyncIterator[Event] = drain(received)
    pumps = []
    for role in SERVER_ROLES:
        queue: asyncio.Queue[object] = asyncio.Queue()
        pumps.append(asyncio.create_task(_pump(recorder.wrap(role, getattr(stages, role), source), queue)))
        source = drain(queue)
    try:
        async for event in source:
            await link.send_down(event)
        await asyncio.gather(*pumps)
    finally:
        for task in [receiver, *pumps]:
            task.cancel()
    await link.send_down(TurnEnd())


async def play_turn(player: Stage, recorder: TurnRecorder, link: Link) -> None:
    async for _ in recorder.wrap("player", player, link.downlink()):
        pass


async def run_turn(
    frames: Sequence[AudioFrame],
    stages: ServerStages,
    clock: Clock,
    realtime: bool = True,
    timeout_s: float = 60.0,
    player: Stage | None = None,
) -> TurnTimeline:
    """Run one turn over the in-process link and return what the recorder saw."""
    recorder = TurnRecorder(clock)
    link = InProcessLink()
    uplink = asyncio.create_task(stream_audio(frames, link, realtime))
    work = [
        asyncio.create_task(serve_turn(stages, recorder, link)),
        asyncio.create_task(play_turn(player or Player(), recorder, link)),
    ]
    try:
        async with asyncio.timeout(timeout_s) as limit:
            await asyncio.gather(*work)
    except TimeoutError as exc:
        if limit.expired():
            recorder.fail("timeout", f"turn exceeded its {timeout_s:g} s limit")
        else:
            recorder.fail(type(exc).__name__, str(exc))
    except Exception as exc:  # a failing stage fails its turn, never the run (M7)
        recorder.fail(type(exc).__name__, str(exc) or type(exc).__name__)
    finally:
        for task in [uplink, *work]:
            task.cancel()
        await asyncio.gather(uplink, *work, return_exceptions=True)
    _check_complete(recorder)
    return recorder.finish()


def _check_complete(recorder: TurnRecorder) -> None:
    """A turn that ran without error but produced no answer audio is still a failure."""
    tl = recorder.timeline
    if not tl.ok:
        return
    if tl.vad.end_ns is None:
        recorder.fail("no_speech", "the VAD found no speech in the audio")
    elif not tl.asr.text.strip():
        recorder.fail("empty_transcript", "the ASR returned no text")
    elif tl.playback.last_end_ns is None:
        recorder.fail("no_audio_out", "the turn produced no audio")
