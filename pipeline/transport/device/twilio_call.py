"""A telephony caller: one call to a bot that speaks Twilio Media Streams, its questions said in real time and
each answer heard through a phone's playout buffer.

The caller plays Twilio's part (``wire.twilio``): ``connected`` and ``start`` (the stream's and the call's ids,
mu-law at 8 kHz), then a 20 ms ``media`` message every 20 ms for as long as the call lasts (a phone line carries
silence between words: a bot's VAD ends the user's turn on it), the question's audio where it is said, and
``stop`` at the end. What the bot sends is kept where a bot may send it (``twilio_order.FromBot``): its media
goes into the playout buffer (``phone_playout``), its marks are echoed once their audio has played, a ``clear``
drops what is queued. The protocol says nothing of where an answer begins or ends, so a turn's answer is the
first sound played after the question's end of speech, and it is over after ``phone_playout.GAP_MS`` of played
silence, or a clear: both inferred from the sound, as ``CallTurn`` says.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from pipeline.clock import Clock
from pipeline.transport.device.phone_playout import HeardAnswer, Playout
from pipeline.transport.wire import g711
from pipeline.transport.wire import twilio as tw
from pipeline.transport.wire.twilio_order import FromBot

FRAME_SAMPLES = 160  # 20 ms at 8 kHz: what Twilio sends per media message
FRAME_NS = FRAME_SAMPLES * 1_000_000_000 // g711.SAMPLE_RATE
SILENCE = b"\xff" * FRAME_SAMPLES  # mu-law's zero
LONGEST_ANSWER_NS = 120 * 1_000_000_000  # an answer still playing this long after the question: the turn ends anyway


@dataclass(frozen=True, slots=True)
class CallQuestion:
    """A question to say: its id, its audio (16-bit linear at 8 kHz) and where its speech ends (ms into it)."""

    question_id: str
    pcm: np.ndarray
    speech_end_ms: float


@dataclass(frozen=True, slots=True)
class CallTurn:
    """One question on the call: when its speech ended (the clock's ns, as the caller sent it; None: it was never
    said) and its answer as the phone played it (None: nothing audible within the wait). The answer's edges are
    inferred from the sound: the protocol marks neither. ``error``: why the turn failed (the bot closed the
    call), "" when it did not."""

    question_id: str
    speech_end_ns: int | None
    heard: HeardAnswer | None
    error: str = ""


@dataclass(frozen=True, slots=True)
class Call:
    """A call's turns, what the caller dropped of the bot's messages (by why), and its marks echoed."""

    turns: list[CallTurn]
    dropped: Counter[str]
    echoed: list[str]


class _Line:
    """The call's state shared by its sender and its reader."""

    def __init__(self, ws: ClientConnection, clock: Clock, stream_sid: str) -> None:
        self.ws, self.clock, self.stream_sid = ws, clock, stream_sid
        self.playout = Playout()
        self.bot = FromBot(stream_sid)
        self.echoed: list[str] = []
        self.chunk = 0
        self.sequence = 1  # the start's; every message after ``connected`` is numbered, as Twilio numbers them
        self.t0 = clock.now_ns()
        self.speech_end: int | None = None  # the question being asked: where its speech ended, once it is said

    async def read(self) -> None:
        """Every message the bot sends, into the playout as it arrives."""
        try:
            async for data in self.ws:
                at = self.clock.now_ns()
                item = self.bot.take(tw.read(data))
                if isinstance(item, tw.Sound):
                    self.playout.media(at, g711.decode(item.ulaw))
                elif isinstance(item, tw.MarkEvent):
                    self.playout.mark(at, item.mark.name)
                elif isinstance(item, tw.ClearEvent):
                    self.playout.clear(at)
        except ConnectionClosed:
            return

    async def say(self, ulaw: bytes) -> None:
        """One 20 ms frame, sent when it is due (the line's own pace, from the call's start), and the marks whose
        audio has played echoed."""
        due = self.t0 + self.chunk * FRAME_NS
        await asyncio.sleep(max(0, due - self.clock.now_ns()) / 1e9)
        self.chunk += 1
        await self.ws.send(tw.encode(tw.media(self.stream_sid, ulaw, self.chunk, (self.chunk - 1) * 20, self.next())))
        for name, _due in self.playout.echoes(self.clock.now_ns()):
            await self.ws.send(tw.encode(tw.MarkEvent(tw.MarkBody(name), self.stream_sid, str(self.next()))))
            self.echoed.append(name)

    def next(self) -> int:
        self.sequence += 1
        return self.sequence


async def call(url: str, questions: Sequence[CallQuestion], clock: Clock, answer_wait_s: float = 10.0) -> Call:
    """Call the bot at ``url`` and ask ``questions`` one after another, each once its answer is over (or
    ``answer_wait_s`` after its speech ended, when none came). A bot that closes the call fails the turn it cut
    and leaves the rest unasked, each a turn that says so: the turns before keep their figures."""
    stream_sid, call_sid = "MZ" + secrets.token_hex(16), "CA" + secrets.token_hex(16)
    turns = []
    async with connect(url, max_size=2 * tw.MOST_CHARS, compression=None) as ws:
        await ws.send(tw.encode(tw.ConnectedEvent()))
        start = tw.StartInfo(stream_sid, "AC" + "0" * 32, call_sid)
        await ws.send(tw.encode(tw.StartEvent(start, stream_sid, "1")))
        line = _Line(ws, clock, stream_sid)
        reader = asyncio.create_task(line.read())
        try:
            for q in questions:
                turns.append(await _ask(line, q, round(answer_wait_s * 1e9)))
            stop = tw.StopEvent(tw.StopInfo(start.account_sid, call_sid), stream_sid, str(line.next()))
            await ws.send(tw.encode(stop))
        except ConnectionClosed as exc:
            why = f"the bot closed the call ({exc})"
            end = line.speech_end  # what was heard of the cut turn's answer stays, as far as it had played
            heard = None if end is None else line.playout.answer(end, clock.now_ns())
            turns.append(CallTurn(questions[len(turns)].question_id, end, heard, why))
            turns += [CallTurn(q.question_id, None, None, f"not asked: {why}") for q in questions[len(turns) :]]
        finally:
            reader.cancel()
    return Call(turns, line.bot.dropped, line.echoed)


async def _ask(line: _Line, q: CallQuestion, wait_ns: int) -> CallTurn:
    """Say ``q`` (its frames at the line's pace), then silence until its answer is over or the wait ran out."""
    ulaw = g711.encode(q.pcm)
    first_chunk, line.speech_end = line.chunk, None
    for i in range(0, len(ulaw), FRAME_SAMPLES):
        await line.say(ulaw[i : i + FRAME_SAMPLES].ljust(FRAME_SAMPLES, SILENCE[:1]))
    # a frame's samples were captured in the frame's length before it is sent (as the device emulator's pacer has it)
    speech_end = line.t0 + (first_chunk - 1) * FRAME_NS + round(q.speech_end_ms * 1_000_000)
    line.speech_end = speech_end
    while True:
        now = line.clock.now_ns()
        heard = line.playout.answer(speech_end, now)
        waited = now - speech_end
        if (heard is not None and heard.over) or waited > (wait_ns if heard is None else LONGEST_ANSWER_NS):
            return CallTurn(q.question_id, speech_end, heard)
        await line.say(SILENCE)
