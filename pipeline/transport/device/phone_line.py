"""A call to a voice bot over one WebSocket, whatever the bot's wire: the line paced in real time, each question said
on it and its answer heard through a phone's playout buffer.

``Line`` holds what every such call shares: the line sends a frame of the caller's audio every 20 ms from the call's
start, whatever the turns do (silence unless a question is being said: a bot's VAD ends the user's turn on it; a
question is said from the next frame on, as a person starts talking), records each send's lateness on the loop's
record (a ramp voids a step its generator was late in), and hands everything the bot sends to the wire's own
reading, which plays audio into the ``phone_playout`` buffer; with a ``phone_recording``, what was said and played
goes to the call's recording. ``ask`` says one question and listens until its answer is over: the first sound played
after the question's end of speech, over after ``phone_playout.GAP_MS`` of played silence or a clear, as the buffer
infers it. A wire says how its messages look (``twilio_call``: Twilio Media Streams; ``pipecat_call``: Pipecat's
protobuf frames). Queued audio past ``MOST_QUEUED_S`` is dropped and counted, and so are the bot's marks past
``MOST_MARKS`` a turn: a bot cannot grow the caller's memory by sending faster than the phone plays.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Self

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from pipeline.clock import Clock
from pipeline.transport.device.pacer import send_lateness
from pipeline.transport.device.phone_playout import HeardAnswer, Playout
from pipeline.transport.device.phone_recording import CallRecording

FRAME_MS = 20  # what a phone line sends per message
FRAME_NS = FRAME_MS * 1_000_000
LONGEST_ANSWER_NS = 120 * 1_000_000_000  # an answer still playing this long after the question: the turn ends anyway
MOST_QUEUED_S = 300  # estimated: five minutes of answer waiting to play is no answer a caller waits for
MOST_MARKS = 10_000  # a turn's marks from the bot kept at most (a bot sends a few dozen)
POLL_S = FRAME_MS / 1000  # how often a turn looks at what has played
Message = str | bytes


@dataclass(frozen=True, slots=True)
class CallQuestion:
    """A question to say: its id, its audio (16-bit linear at the line's rate) and where its speech ends (ms)."""

    question_id: str
    pcm: np.ndarray
    speech_end_ms: float


@dataclass(frozen=True, slots=True)
class CallTurn:
    """One question on the call: when its speech ended (the clock's ns, as the caller sent it; None: it was never
    said) and its answer as the phone played it (None: nothing audible within the wait), its edges inferred from
    the sound. ``error``: why the turn failed (the bot closed the call), "" when it did not. ``first_sent_ns`` /
    ``last_sent_ns`` / ``frames``: the turn's audio sent, from the question's first frame to the last before the
    turn ended. ``marks``: what the bot's wire said of itself in the turn (when, what), where it says anything."""

    question_id: str
    speech_end_ns: int | None
    heard: HeardAnswer | None
    error: str = ""
    first_sent_ns: int | None = None
    last_sent_ns: int | None = None
    frames: int = 0
    marks: tuple[tuple[int, str, str], ...] = ()  # (when, what, its text: "" for most)


@dataclass(slots=True)
class _Sent:
    """The frames a turn sent: when the first and the last went, and how many."""

    first: int | None = None
    last: int | None = None
    frames: int = 0

    def add(self, at_ns: int) -> None:
        self.first = at_ns if self.first is None else self.first
        self.last, self.frames = at_ns, self.frames + 1


@dataclass(slots=True)
class _Marks:
    """The bot's marks of the turn under way, bounded."""

    kept: list[tuple[int, str, str]] = field(default_factory=list)

    def add(self, at_ns: int, what: str, dropped: Counter[str], text: str = "") -> None:
        if len(self.kept) < MOST_MARKS:
            self.kept.append((at_ns, what, text))
        else:
            dropped["too_many_marks"] += 1


class Line:
    """A call in progress: ``async with`` places it and hangs up; a frame of line audio goes every 20 ms in
    between; ``ask`` says one question and hears its answer. A bot that closes the call ends the line: the turn
    under way and every later one fail, saying so. A wire subclasses it: ``rate``, ``opening``, ``frame``,
    ``heard``, ``closing``."""

    rate = 8000  # the caller's audio, samples a second
    max_size = 2**20  # the largest message the bot may send (the wire's bound)

    def __init__(self, url: str, clock: Clock) -> None:
        self.url, self.clock = url, clock
        self.playout = Playout()
        self.dropped: Counter[str] = Counter()
        self.chunk = 0  # the next frame's index from the call's start
        self.t0 = 0
        self.speaking: deque[np.ndarray] = deque()  # the question's frames not yet sent
        self.said = asyncio.Event()  # the question's last frame has been sent
        self.sent = _Sent()  # the frames of the turn under way
        self.marks = _Marks()
        self.recording: CallRecording | None = None  # --record-audio: what was said and played
        self.gone: ConnectionClosed | None = None
        self._ws: ClientConnection | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def frame_samples(self) -> int:
        return self.rate * FRAME_MS // 1000

    # --- the wire's part ---------------------------------------------------------------------

    def opening(self) -> list[Message]:
        """What the caller says first, once connected."""
        return []

    def frame(self, pcm: np.ndarray, index: int) -> Message:
        """One 20 ms frame of the caller's audio (16-bit linear), the ``index``-th of the call."""
        raise NotImplementedError

    def heard(self, data: Message, at_ns: int) -> list[Message]:
        """What the bot sent at ``at_ns``, taken in; what the caller answers at once (none, mostly)."""
        raise NotImplementedError

    def after_frame(self, now_ns: int) -> list[Message]:
        """What the caller sends after a frame of its audio (Twilio's echoed marks), if anything."""
        return []

    def closing(self) -> list[Message]:
        """What the caller says when it hangs up (the bot still there)."""
        return []

    # --- the call ------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._ws = ws = await connect(self.url, max_size=self.max_size, compression=None)
        try:
            for message in self.opening():
                await ws.send(message)
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
                for message in self.closing():
                    await self._ws.send(message)
        await self._ws.close()

    def play(self, at_ns: int, pcm: np.ndarray, rate: int) -> None:
        """The bot's audio into the playout buffer, unless the buffer already holds more than a caller waits for."""
        if self.playout.queued_ns(at_ns) > MOST_QUEUED_S * 1_000_000_000:
            self.dropped["playout_full"] += 1
            return
        chunk = self.playout.media(at_ns, pcm, rate)
        if self.recording is not None:
            self.recording.queued(chunk, pcm)

    async def _read(self, ws: ClientConnection) -> None:
        """Every message the bot sends, taken in as it arrives."""
        try:
            async for data in ws:
                for reply in self.heard(data, self.clock.now_ns()):
                    await ws.send(reply)
        except ConnectionClosed as exc:
            self.gone = exc

    async def _line(self, ws: ClientConnection) -> None:
        """A frame every 20 ms from the call's start: the question's, else silence."""
        late, silence = send_lateness(), np.zeros(self.frame_samples, dtype=np.int16)
        try:
            while True:
                due = self.t0 + self.chunk * FRAME_NS
                await asyncio.sleep(max(0, due - self.clock.now_ns()) / 1e9)
                late.record((self.clock.now_ns() - due) / 1e6)
                pcm = self.speaking.popleft() if self.speaking else silence
                self.chunk += 1  # before the send: a question queued meanwhile starts at the next index
                await ws.send(self.frame(pcm, self.chunk - 1))
                self.sent.add(self.clock.now_ns())
                if self.recording is not None:  # captured in the frame's length before its due time
                    self.recording.said(pcm, self.rate, due)
                    self.recording.played_by(self.clock.now_ns())
                if not self.speaking:
                    self.said.set()
                for message in self.after_frame(self.clock.now_ns()):
                    await ws.send(message)
        except ConnectionClosed as exc:
            self.gone = exc

    async def ask(self, q: CallQuestion, wait_ns: int) -> CallTurn:
        """Say ``q`` from the line's next frame, then listen until its answer is over (or ``wait_ns`` after its
        speech ended, when none came). A bot that closed the call fails the turn, keeping what was heard."""
        self.playout.forget(self.clock.now_ns())  # an earlier answer, all played: this turn never asks of it
        self.sent, self.marks = _Sent(), _Marks()
        self.said.clear()
        # the question's first frame goes next: its samples were captured in the frame's length before it is sent
        # (as the device emulator's pacer has it)
        speech_end = self.t0 + (self.chunk - 1) * FRAME_NS + round(q.speech_end_ms * 1_000_000)
        n = self.frame_samples
        pcm = np.asarray(q.pcm, dtype=np.int16)
        pcm = np.concatenate([pcm, np.zeros(-len(pcm) % n, dtype=np.int16)])
        self.speaking.extend(pcm[i : i + n] for i in range(0, len(pcm), n))
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
        sent, marks = self.sent, tuple(self.marks.kept)
        if self.gone is None:
            return CallTurn(q.question_id, speech_end, heard, "", sent.first, sent.last, sent.frames, marks)
        said = self.said.is_set()
        heard = self.playout.answer(speech_end, self.clock.now_ns()) if said else None
        why = f"the bot closed the call ({self.gone})"
        end = speech_end if said else None
        return CallTurn(q.question_id, end, heard, why, sent.first, sent.last, sent.frames, marks)
