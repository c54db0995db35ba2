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
from pipeline.run.cpu import CpuMeter
from pipeline.run.device_side import InProcessLink, Link, Player, ServerSide, close, drain, stream_audio
from pipeline.run.recorder import TurnRecorder
from pipeline.tracing.timeline import TurnTimeline


@dataclass(frozen=True, slots=True)
class ServerStages:
    """One turn's server stages, one per role in the order ``serve_turn`` chains them (``SERVER_ROLES``)."""

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


async def serve_turn(
    stages: ServerStages, recorder: TurnRecorder, link: ServerSide, tasks: list[asyncio.Task[None]] | None = None
) -> None:
    """The server side: chain the stages, each in its own task, and send the audio down.

    The stage tasks are added to ``tasks`` so that whoever runs the turn can wait for all of
    them after a cancellation (a stage may still be finishing its engine's work).
    """
    received: asyncio.Queue[object] = asyncio.Queue()
    # audio keeps arriving after the end-point; the turn does not wait for the device to stop
    receiver = asyncio.create_task(_pump(recorder.receive(link.uplink()), received))
    source: AsyncIterator[Event] = drain(received)
    pumps = []
    for role in SERVER_ROLES:
        queue: asyncio.Queue[object] = asyncio.Queue()
        pumps.append(asyncio.create_task(_pump(recorder.wrap(role, getattr(stages, role), source), queue)))
        source = drain(queue)
    if tasks is not None:
        tasks += [receiver, *pumps]
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
    meter: CpuMeter | None = None,
) -> TurnTimeline:
    """Run one turn over the in-process link and return what the recorder saw (with ``meter``, each stage's
    CPU too)."""
    recorder = TurnRecorder(clock, meter=meter)
    link = InProcessLink()
    others = [asyncio.create_task(stream_audio(frames, link, realtime))]  # serve_turn adds its stage tasks
    work = [
        asyncio.create_task(serve_turn(stages, recorder, link, others)),
        asyncio.create_task(play_turn(player or Player(), recorder, link)),
    ]
    await supervise(recorder, work, others, timeout_s)
    check_complete(recorder)
    return recorder.finish()


async def supervise(
    recorder: TurnRecorder, work: list[asyncio.Task[None]], others: list[asyncio.Task[None]], timeout_s: float
) -> None:
    """Wait for a turn's work within its limit; record a failure on the turn, never raise it (M7).

    Whatever is still running afterwards (``others`` too: a stage's engine work) is cancelled and
    waited for, and the wait is recorded, so the next turn starts clean. ``others`` is read at the
    end: tasks the work adds to it while it runs are included.
    """
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
        everything = [*work, *others]
        for task in everything:
            task.cancel()
        recorder.leftover_started()
        await asyncio.gather(*everything, return_exceptions=True)  # a stage's engine work finishes here
        recorder.leftover_done()


# The least audio a sentence can take, per spoken character: a quarter of fast speech (about
# 20 Latin characters or 6 Chinese characters a second), so only audio that is really missing fails.
MIN_MS_PER_LATIN = 12.5
MIN_MS_PER_CJK = 40.0


def min_audio_ms(text: str) -> float:
    cjk = sum(1 for ch in text if "\u3400" <= ch <= "\u9fff")
    latin = sum(1 for ch in text if ch.isalnum()) - cjk
    return cjk * MIN_MS_PER_CJK + latin * MIN_MS_PER_LATIN


def check_complete(recorder: TurnRecorder, played: bool = True, spoken: bool = True) -> None:
    """A turn that ran without error but produced no answer audio is still a failure.

    ``played=False``: a server's view, which ends when the audio is sent, not played.
    ``spoken=False``: a typed question (xiaozhi's ``listen detect``), which no VAD end-points."""
    tl = recorder.timeline
    if not tl.ok:
        return
    if spoken and tl.vad.end_ns is None:
        recorder.fail("no_speech", "the VAD found no speech in the audio")
    elif not tl.asr.text.strip():
        recorder.fail("empty_transcript", "the ASR returned no text")
    elif played and tl.playback.last_end_ns is None:
        recorder.fail("no_audio_out", "the turn produced no audio")
    else:
        _check_tts(recorder)


def _check_tts(recorder: TurnRecorder) -> None:
    """Every sentence handed to TTS must come back as audio of a plausible length for its text."""
    texts = {s.index: s.text for s in recorder.timeline.sentences}
    for tts in recorder.timeline.tts:
        text = texts.get(tts.sentence_index, "")
        if tts.audio_ms == 0:
            recorder.fail("tts_no_audio", f"TTS produced no audio for sentence {tts.sentence_index}: {text!r}")
            return
        if tts.audio_ms < min_audio_ms(text):
            recorder.fail(
                "tts_short_audio",
                f"TTS produced {tts.audio_ms} ms of audio for sentence {tts.sentence_index} ({text!r}), "
                f"at least {min_audio_ms(text):.0f} ms expected",
            )
            return
