"""A telephony caller: a call to a bot that speaks Twilio Media Streams (``phone_line``'s line on Twilio's wire).

The caller plays Twilio's part (``wire.twilio``): ``connected`` and ``start`` (the stream's and the call's ids,
mu-law at 8 kHz), then a 20 ms ``media`` message every 20 ms for as long as the call lasts, each after the first
numbered as Twilio numbers them, and ``stop`` at the end. What the bot sends is kept where a bot may send it
(``twilio_order.FromBot``): its media goes into the playout buffer, its marks are echoed once their audio has
played, a ``clear`` drops what is queued. The protocol says nothing of where an answer begins or ends: both are
inferred from the sound (``phone_line``, ``phone_playout``).
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.clock import Clock
from pipeline.transport.device.phone_line import MOST_MARKS, CallQuestion, CallTurn, Line, Message
from pipeline.transport.wire import g711
from pipeline.transport.wire import twilio as tw
from pipeline.transport.wire.twilio_order import FromBot


@dataclass(frozen=True, slots=True)
class Call:
    """A call's turns, what the caller dropped of the bot's messages (by why), and its marks echoed."""

    turns: list[CallTurn]
    dropped: Counter[str]
    echoed: list[str]


class TwilioLine(Line):
    """A call on Twilio's wire."""

    rate = g711.SAMPLE_RATE
    max_size = 2 * tw.MOST_CHARS

    def __init__(self, url: str, clock: Clock) -> None:
        super().__init__(url, clock)
        self.stream_sid, self.call_sid = "MZ" + secrets.token_hex(16), "CA" + secrets.token_hex(16)
        self.account_sid = "AC" + "0" * 32
        self.bot = FromBot(self.stream_sid)
        self.dropped = self.bot.dropped  # one count of what was dropped, the order's and the line's
        self.echoed: list[str] = []
        self.sequence = 1  # the start's; every message after ``connected`` is numbered, as Twilio numbers them

    def opening(self) -> list[Message]:
        start = tw.StartInfo(self.stream_sid, self.account_sid, self.call_sid)
        return [tw.encode(tw.ConnectedEvent()), tw.encode(tw.StartEvent(start, self.stream_sid, "1"))]

    def frame(self, pcm: np.ndarray, index: int) -> Message:
        return tw.encode(tw.media(self.stream_sid, g711.encode(pcm), index + 1, index * 20, self.next()))

    def heard(self, data: Message, at_ns: int) -> list[Message]:
        item = self.bot.take(tw.read(data))
        if isinstance(item, tw.Sound):
            self.play(at_ns, g711.decode(item.ulaw), g711.SAMPLE_RATE)
        elif isinstance(item, tw.MarkEvent):
            if len(self.playout.marks) >= MOST_MARKS:  # each is echoed: a flood is neither kept nor sent back
                self.dropped["too_many_marks"] += 1
            else:
                self.playout.mark(at_ns, item.mark.name)
        elif isinstance(item, tw.ClearEvent):
            self.playout.clear(at_ns)
        return []

    def after_frame(self, now_ns: int) -> list[Message]:
        """The bot's marks whose audio has played, echoed."""
        out: list[Message] = []
        for name, _due in self.playout.echoes(now_ns):
            out.append(tw.encode(tw.MarkEvent(tw.MarkBody(name), self.stream_sid, str(self.next()))))
            self.echoed.append(name)
        return out

    def closing(self) -> list[Message]:
        return [
            tw.encode(tw.StopEvent(tw.StopInfo(self.account_sid, self.call_sid), self.stream_sid, str(self.next())))
        ]

    def next(self) -> int:
        self.sequence += 1
        return self.sequence


async def call(url: str, questions: Sequence[CallQuestion], clock: Clock, answer_wait_s: float = 10.0) -> Call:
    """Call the bot at ``url`` and ask ``questions`` one after another, each once its answer is over (or
    ``answer_wait_s`` after its speech ended, when none came). A bot that closes the call fails the turn it cut
    and leaves the rest unasked, each a turn that says so: the turns before keep their figures."""
    turns: list[CallTurn] = []
    async with TwilioLine(url, clock) as line:
        for q in questions:
            if line.gone is not None:
                turns.append(CallTurn(q.question_id, None, None, f"not asked: the bot closed the call ({line.gone})"))
                continue
            turns.append(await line.ask(q, round(answer_wait_s * 1e9)))
    return Call(turns, line.dropped, line.echoed)
