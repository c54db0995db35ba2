"""The device side of a turn: it streams captured audio up and plays what comes down.

The link between device and server is an interface so that a real xiaozhi
transport (WebSocket, MQTT + UDP) can replace the in-process one without the
pipeline changing. Pacing uses the event loop's time, which is virtual under the
virtual clock.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pipeline.events import FRAME_MS, AudioFrame, AudioOut, Event, SpeechEnd, Stage, StageInfo, TurnEnd
from pipeline.settings.fixtures import Question
from pipeline.tracing.timeline import TurnTimeline

_END = object()


@dataclass(frozen=True, slots=True)
class Ask:
    """One question as a device asks it: its audio, where its speech ends, and the turn span's id."""

    frames: Sequence[AudioFrame]
    speech_end_ms: int | None
    question_id: str
    round_no: int
    traceparent: str  # reserved before the turn: the server's spans join this turn's trace
    true_end_ms: float | None = None  # a question with a truth: where its user really finished (clip ms)


class ServerSide(Protocol):
    """What the server sees of a transport for one turn: audio arriving, events to send down."""

    def uplink(self) -> AsyncIterator[Event]: ...

    async def send_down(self, event: Event) -> None: ...


class Link(ServerSide, Protocol):
    """A bidirectional transport between one device and the server, for one turn."""

    async def send_up(self, frame: AudioFrame) -> None: ...

    async def close_up(self) -> None: ...

    def downlink(self) -> AsyncIterator[Event]: ...


class InProcessLink:
    """Two queues: no network, no serialisation; the baseline transport."""

    def __init__(self) -> None:
        self._up: asyncio.Queue[object] = asyncio.Queue()
        self._down: asyncio.Queue[object] = asyncio.Queue()

    async def send_up(self, frame: AudioFrame) -> None:
        self._up.put_nowait(frame)

    async def close_up(self) -> None:
        close(self._up)

    async def send_down(self, event: Event) -> None:
        self._down.put_nowait(event)

    def uplink(self) -> AsyncIterator[Event]:
        return drain(self._up)

    def downlink(self) -> AsyncIterator[Event]:
        return _until_turn_end(drain(self._down))


async def drain(queue: asyncio.Queue[object]) -> AsyncIterator[Event]:
    """Iterate a queue until its end marker."""
    while True:
        item = await queue.get()
        if item is _END:
            return
        yield item  # type: ignore[misc]


def close(queue: asyncio.Queue[object]) -> None:
    queue.put_nowait(_END)


async def _until_turn_end(events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    async for event in events:
        if isinstance(event, TurnEnd):
            return
        yield event


async def stream_audio(frames: Sequence[AudioFrame], link: Link, realtime: bool) -> None:
    """Send frames as a microphone would: each one once its 60 ms have been captured."""
    loop = asyncio.get_running_loop()
    due = loop.time()
    for frame in frames:
        if realtime:
            due += frame.duration_ms / 1000
            await asyncio.sleep(max(0.0, due - loop.time()))
        await link.send_up(frame)
    await link.close_up()


class Player:
    """Plays downlink audio at real-time speed; yields each frame once it has been played."""

    def __init__(self) -> None:
        self.info = StageInfo(role="player", impl="realtime")
        # the frame just yielded: when it began to play (loop time) and how long after its end it was handed
        # on (the loop's timer fires late), which a device's sample-exact figures need
        self.started_s = 0.0
        self.late_s = 0.0

    async def run(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        loop = asyncio.get_running_loop()
        busy_until = loop.time()
        async for event in events:
            if not isinstance(event, AudioOut):
                continue
            # A frame starts when it arrives or when the previous one finishes, whichever is later.
            busy_until = max(busy_until, loop.time()) + event.duration_ms / 1000
            await asyncio.sleep(max(0.0, busy_until - loop.time()))
            self.started_s = busy_until - event.duration_ms / 1000
            self.late_s = max(0.0, loop.time() - busy_until)
            yield event


async def speech_end_ms(vad: Stage, frames: Sequence[AudioFrame]) -> int | None:
    """Where a clip's speech ends, by the run's VAD, untimed: a device across a real transport marks
    the user's end of speech when it sends that frame, as the in-process run marks its arrival."""

    async def clip() -> AsyncIterator[Event]:
        for frame in frames:
            yield frame

    async for event in vad.run(clip()):
        if isinstance(event, SpeechEnd):
            return event.offset_ms
    return None


def frame_holding(end_ms: float) -> int:
    """The 60 ms frame that holds the last sample of speech ending ``end_ms`` into the clip (the VAD's end of
    speech, or a truth's)."""
    return max(0, math.ceil(end_ms / FRAME_MS) - 1)


def true_end_ms(question: Question) -> float | None:
    """Where the question's user really finished (clip ms), None for a question without a truth."""
    return question.truth.speech_end_ms if question.truth is not None else None


def mark_true_end(timeline: TurnTimeline, question: Question) -> None:
    """In-process: the question's true end of speech is when the frame holding its last speech sample reached
    the server, as the VAD's end of speech is its frame's arrival (``recorder``). A turn that ended before that
    frame came (its answer over while the user was still speaking, after a cut-off) has it from the microphone's
    schedule instead: the frames leave at the pace they are captured (``stream_audio``), so frame ``k`` comes
    ``k`` frames after the first. No truth, or no frame at all: nothing marked."""
    vad = timeline.vad
    if question.truth is None or vad.first_frame_ns is None:
        return
    frame = frame_holding(question.truth.speech_end_ms)
    vad.true_end_ns = vad.frame_arrival_ns.get(frame, vad.first_frame_ns + frame * FRAME_MS * 1_000_000)


async def utterances_in(make_vad: Callable[[], Stage], frames: Sequence[AudioFrame]) -> int:
    """How many utterances the run's end-of-turn detector makes of a whole clip, untimed: after each end-point
    a fresh detector hears the rest from the frame it was declared on, as a server listening on would, so a
    pause it cannot hold splits the question (0: it heard no speech)."""
    count = start = 0
    while start < len(frames) and (heard := await _heard_until_end(make_vad(), frames[start:])) is not None:
        count, start = count + 1, start + heard
    return count


async def _heard_until_end(vad: Stage, frames: Sequence[AudioFrame]) -> int | None:
    """The frames ``vad`` took before it declared an end-point (None: it never did)."""
    fed = 0

    async def clip() -> AsyncIterator[Event]:
        nonlocal fed
        for frame in frames:
            fed += 1
            yield frame

    events = vad.run(clip())
    try:
        async for event in events:
            if isinstance(event, SpeechEnd):
                return fed
    finally:
        if isinstance(events, AsyncGenerator):  # stop the stage now, not when it is collected
            await events.aclose()
    return None
