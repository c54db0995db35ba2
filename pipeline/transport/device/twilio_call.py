"""A telephony caller: one call to a bot that speaks Twilio Media Streams, its questions said in real time and
each answer heard through a phone's playout buffer.

The caller plays Twilio's part (``wire.twilio``): ``connected`` and ``start`` (the stream's and the call's ids,
mu-law at 8 kHz), then a 20 ms ``media`` message every 20 ms for as long as the call lasts (a phone line carries
silence between words: a bot's VAD ends the user's turn on it), the question's audio where it is said, and
``stop`` at the end. The line (``PhoneLine``) paces itself from the call's start, whatever the turns do: a
question is said from the next frame on, as a person on the phone starts talking. What the bot sends is kept
where a bot may send it (``twilio_order.FromBot``): its media goes into the playout buffer (``phone_playout``),
its marks are echoed once their audio has played, a ``clear`` drops what is queued. The protocol says nothing
of where an answer begins or ends, so a turn's answer is the first sound played after the question's end of
speech, and it is over after ``phone_playout.GAP_MS`` of played silence, or a clear: both inferred from the
sound, as ``CallTurn`` says. Queued audio past ``MOST_QUEUED_S`` is dropped and counted: a bot cannot grow the
caller's memory by sending faster than the phone plays.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import Counter, deque
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
MOST_QUEUED_S = 300  # estimated: five minutes of answer waiting to play is no answer a caller waits for
POLL_S = FRAME_NS / 1e9  # how often a turn looks at what has played


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
    call), "" when it did not. ``first_sent_ns`` / ``last_sent_ns`` / ``frames``: the turn's media sent, from
    the question's first frame to the last frame before the turn ended (None, 0: nothing was sent)."""

    question_id: str
    speech_end_ns: int | None
    heard: HeardAnswer | None
    error: str = ""
    first_sent_ns: int | None = None
    last_sent_ns: int | None = None
    frames: int = 0


@dataclass(frozen=True, slots=True)
class Call:
    """A call's turns, what the caller dropped of the bot's messages (by why), and its marks echoed."""

    turns: list[CallTurn]
    dropped: Counter[str]
    echoed: list[str]


@dataclass(slots=True)
class _Sent:
    """The frames a turn sent: when the first and the last went, and how many."""

    first: int | None = None
    last: int | None = None
    frames: int = 0

    def add(self, at_ns: int) -> None:
        self.first = at_ns if self.first is None else self.first
        self.last, self.frames = at_ns, self.frames + 1


class PhoneLine:
    """A call in progress: ``async with`` places it (``connected``, ``start``) and hangs up (``stop``); a frame of
    line audio goes every 20 ms in between, silence unless a question is being said; ``ask`` says one question
    and hears its answer. A bot that closes the call ends the line: the turn under way and every later one
    fail, saying so."""

    def __init__(self, url: str, clock: Clock) -> None:
        self.url, self.clock = url, clock
        self.stream_sid, self.call_sid = "MZ" + secrets.token_hex(16), "CA" + secrets.token_hex(16)
        self.account_sid = "AC" + "0" * 32
        self.playout = Playout()
        self.bot = FromBot(self.stream_sid)
        self.echoed: list[str] = []
        self.chunk = 0  # the next frame's index from the call's start
        self.sequence = 1  # the start's; every message after ``connected`` is numbered, as Twilio numbers them
        self.t0 = 0
        self.speaking: deque[bytes] = deque()  # the question's frames not yet sent
        self.said = asyncio.Event()  # the question's last frame has been sent
        self.sent = _Sent()  # the frames of the turn under way
        self.gone: ConnectionClosed | None = None
        self._ws: ClientConnection | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> PhoneLine:
        self._ws = ws = await connect(self.url, max_size=2 * tw.MOST_CHARS, compression=None)
        try:
            await ws.send(tw.encode(tw.ConnectedEvent()))
            start = tw.StartInfo(self.stream_sid, self.account_sid, self.call_sid)
            await ws.send(tw.encode(tw.StartEvent(start, self.stream_sid, "1")))
        except BaseException:
            await ws.close()
            raise
        self.t0 = self.clock.now_ns()
        self._tasks = [asyncio.create_task(self._read(ws)), asyncio.create_task(self._line(ws))]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        assert self._ws is not None
        if self.gone is None:
            with contextlib.suppress(ConnectionClosed):
                stop = tw.StopEvent(tw.StopInfo(self.account_sid, self.call_sid), self.stream_sid, str(self.next()))
                await self._ws.send(tw.encode(stop))
        await self._ws.close()

    @property
    def dropped(self) -> Counter[str]:
        return self.bot.dropped

    async def _read(self, ws: ClientConnection) -> None:
        """Every message the bot sends, into the playout as it arrives."""
        try:
            async for data in ws:
                at = self.clock.now_ns()
                item = self.bot.take(tw.read(data))
                if isinstance(item, tw.Sound):
                    if self.playout.queued_ns(at) > MOST_QUEUED_S * 1_000_000_000:
                        self.bot.dropped["playout_full"] += 1
                        continue
                    self.playout.media(at, g711.decode(item.ulaw))
                elif isinstance(item, tw.MarkEvent):
                    self.playout.mark(at, item.mark.name)
                elif isinstance(item, tw.ClearEvent):
                    self.playout.clear(at)
        except ConnectionClosed as exc:
            self.gone = exc

    async def _line(self, ws: ClientConnection) -> None:
        """A frame every 20 ms from the call's start (the question's, else silence), and the marks whose audio has
        played echoed."""
        try:
            while True:
                due = self.t0 + self.chunk * FRAME_NS
                await asyncio.sleep(max(0, due - self.clock.now_ns()) / 1e9)
                ulaw = self.speaking.popleft() if self.speaking else SILENCE
                self.chunk += 1  # before the send: a question queued meanwhile starts at the next index
                media = tw.media(self.stream_sid, ulaw, self.chunk, (self.chunk - 1) * 20, self.next())
                await ws.send(tw.encode(media))
                self.sent.add(self.clock.now_ns())
                if not self.speaking:
                    self.said.set()
                for name, _due in self.playout.echoes(self.clock.now_ns()):
                    await ws.send(tw.encode(tw.MarkEvent(tw.MarkBody(name), self.stream_sid, str(self.next()))))
                    self.echoed.append(name)
        except ConnectionClosed as exc:
            self.gone = exc

    def next(self) -> int:
        self.sequence += 1
        return self.sequence

    async def ask(self, q: CallQuestion, wait_ns: int) -> CallTurn:
        """Say ``q`` from the line's next frame, then listen until its answer is over (or ``wait_ns`` after its
        speech ended, when none came). A bot that closed the call fails the turn, keeping what was heard."""
        ulaw = g711.encode(q.pcm)
        self.playout.forget(self.clock.now_ns())  # an earlier answer, all played: this turn never asks of it
        self.sent = _Sent()
        self.said.clear()
        # the question's first frame goes next: its samples were captured in the frame's length before it is sent
        # (as the device emulator's pacer has it)
        speech_end = self.t0 + (self.chunk - 1) * FRAME_NS + round(q.speech_end_ms * 1_000_000)
        self.speaking.extend(
            ulaw[i : i + FRAME_SAMPLES].ljust(FRAME_SAMPLES, SILENCE[:1]) for i in range(0, len(ulaw), FRAME_SAMPLES)
        )
        while not self.said.is_set() and self.gone is None:
            await asyncio.sleep(POLL_S)
        heard: HeardAnswer | None = None
        while self.gone is None:
            now = self.clock.now_ns()
            heard = self.playout.answer(speech_end, now)
            waited = now - speech_end
            if (heard is not None and heard.over) or waited > (wait_ns if heard is None else LONGEST_ANSWER_NS):
                break
            await asyncio.sleep(POLL_S)
        sent = self.sent
        if self.gone is None:
            return CallTurn(q.question_id, speech_end, heard, "", sent.first, sent.last, sent.frames)
        said = self.said.is_set()
        heard = self.playout.answer(speech_end, self.clock.now_ns()) if said else None
        why = f"the bot closed the call ({self.gone})"
        return CallTurn(q.question_id, speech_end if said else None, heard, why, sent.first, sent.last, sent.frames)


async def call(url: str, questions: Sequence[CallQuestion], clock: Clock, answer_wait_s: float = 10.0) -> Call:
    """Call the bot at ``url`` and ask ``questions`` one after another, each once its answer is over (or
    ``answer_wait_s`` after its speech ended, when none came). A bot that closes the call fails the turn it cut
    and leaves the rest unasked, each a turn that says so: the turns before keep their figures."""
    turns: list[CallTurn] = []
    async with PhoneLine(url, clock) as line:
        for q in questions:
            if line.gone is not None:
                turns.append(CallTurn(q.question_id, None, None, f"not asked: the bot closed the call ({line.gone})"))
                continue
            turns.append(await line.ask(q, round(answer_wait_s * 1e9)))
    return Call(turns, line.dropped, line.echoed)
