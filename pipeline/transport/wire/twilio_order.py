"""What each end of a Twilio Media Stream takes from the other, in what order; everything else a counted drop.

Read at the edge (``twilio.read``), an event is kept only where the protocol puts it:

- ``FromBot``, the caller's side: a bot sends ``media``, ``mark`` and ``clear`` for this call's stream. Anything
  else (a ``start`` or ``stop`` a bot has no business sending, an event of another stream, one that did not read)
  is dropped and counted by why.
- ``FromCaller``, the bot's side: ``connected``, then one ``start``, then ``media``, ``dtmf`` and ``mark`` until
  ``stop``. Media before the start (its stream unknown), a second start, anything after the stop, is dropped and
  counted; ``ended`` says the stop came.

Neither keeps more than its counts (bounded by the reasons there are), so a peer that sends nonsense forever costs
the other end a counter, never memory or a stalled loop.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pipeline.transport.wire.messages import Malformed
from pipeline.transport.wire.twilio import (
    ClearEvent,
    ConnectedEvent,
    DtmfEvent,
    Inbound,
    MarkEvent,
    OtherEvent,
    Sound,
    StartEvent,
    StopEvent,
)

FromBotKept = Sound | MarkEvent | ClearEvent
FromCallerKept = ConnectedEvent | StartEvent | Sound | DtmfEvent | MarkEvent | StopEvent


def name_of(item: Inbound) -> str:
    """The event's name as the wire spells it (``media`` for audio), as a drop is counted by."""
    if isinstance(item, Sound):
        return "media"
    if isinstance(item, OtherEvent):
        return "an unknown event"  # not its name: a peer's words are no counter's key (the counts stay bounded)
    if isinstance(item, Malformed):
        return "malformed"
    return str(type(item).__struct_config__.tag)


def _stream_of(item: Inbound) -> str | None:
    return getattr(item, "stream_sid", None)


@dataclass(slots=True)
class FromBot:
    """The caller's side of the stream ``stream_sid``: what it keeps of a bot's messages, and what it dropped."""

    stream_sid: str
    dropped: Counter[str] = field(default_factory=Counter)

    def take(self, item: Inbound) -> FromBotKept | None:
        """``item`` where a bot may send it; None (and counted) where not."""
        if isinstance(item, Malformed):
            return self._drop(item.what)
        if not isinstance(item, Sound | MarkEvent | ClearEvent):
            return self._drop(f"{name_of(item)} from the bot")
        if _stream_of(item) not in (None, self.stream_sid):
            return self._drop(f"{name_of(item)} of another stream")
        return item

    def _drop(self, why: str) -> FromBotKept | None:
        self.dropped[why] += 1
        return None


@dataclass(slots=True)
class FromCaller:
    """The bot's side: the caller's events in the order the protocol gives them, and what came out of it."""

    stream_sid: str | None = None  # the start's, once it came
    ended: bool = False
    dropped: Counter[str] = field(default_factory=Counter)

    def take(self, item: Inbound) -> FromCallerKept | None:
        """``item`` where the protocol puts it; None (and counted) where not."""
        if isinstance(item, Malformed):
            return self._drop(item.what)
        if isinstance(item, OtherEvent | ClearEvent):
            return self._drop(f"{name_of(item)} from the caller")
        if self.ended:
            return self._drop(f"{name_of(item)} after the stop")
        if isinstance(item, ConnectedEvent):
            return item if self.stream_sid is None else self._drop("connected after the start")
        if isinstance(item, StartEvent):
            if self.stream_sid is not None:
                return self._drop("a second start")
            self.stream_sid = item.stream_sid or item.start.stream_sid
            return item
        if self.stream_sid is None:
            return self._drop(f"{name_of(item)} before the start")
        if _stream_of(item) not in (None, self.stream_sid):
            return self._drop(f"{name_of(item)} of another stream")
        self.ended = isinstance(item, StopEvent)
        return item

    def _drop(self, why: str) -> FromCallerKept | None:
        self.dropped[why] += 1
        return None
