"""Twilio Media Streams messages, typed, decoded once where they arrive and encoded where they leave.

A telephony voice agent (a Pipecat bot behind its Twilio serializer, any bot written for Twilio's
``<Connect><Stream>``) talks to the phone network over one WebSocket of JSON text messages, each an object with
a string ``event`` (Twilio's "Media Streams - WebSocket Messages"). The caller's side (Twilio, here the lab's
caller) sends ``connected``, ``start`` (the stream's and the call's ids, the audio format), ``media`` (the
caller's audio: base64 mu-law at 8 kHz, ``wire.g711``, 20 ms a message, with a chunk number and a timestamp in
ms), ``dtmf``, ``mark`` (a bot's mark echoed once the audio queued before it has played) and ``stop``; the bot
sends ``media`` (its answer, as fast as it makes it), ``mark`` and ``clear`` (drop what is queued: a barge-in).
Field names are camelCase on the wire; numbers inside ``media`` and ``sequenceNumber`` are strings.

Each event the lab acts on is a struct below; fields a struct does not name are ignored. An event no struct
names decodes to ``OtherEvent``. A ``media`` message's audio is decoded here, once, into ``Sound`` (so nothing past
the edge reads base64), and bounded: a message over ``MOST_CHARS`` is not parsed at all, audio over
``MOST_AUDIO_BYTES`` or not strict base64 is refused. Whatever does not read is a ``messages.Malformed`` naming
what was wrong, which an end counts or closes on, never an exception.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import msgspec

from pipeline.transport.wire import g711
from pipeline.transport.wire.failures import ProtocolError
from pipeline.transport.wire.messages import Malformed

MOST_AUDIO_SECONDS: Final = 10  # the most one media message may carry (estimated: bots send 20-40 ms, a whole answer
# in one message is still under this, a message past it is an attack on the caller's memory)
MOST_AUDIO_BYTES: Final = MOST_AUDIO_SECONDS * g711.SAMPLE_RATE
MOST_CHARS: Final = (MOST_AUDIO_BYTES + 2) // 3 * 4 + 4096  # that audio in base64, and room for the rest
MULAW: Final = "audio/x-mulaw"


class MediaFormat(msgspec.Struct, frozen=True, rename="camel"):
    """A ``start``'s ``mediaFormat``: what the caller's audio is (Twilio's is always mu-law, 8 kHz, mono)."""

    encoding: str = MULAW
    sample_rate: int = g711.SAMPLE_RATE
    channels: int = 1


class StartInfo(msgspec.Struct, frozen=True, rename="camel"):
    """A ``start``'s body: whose call and stream this is, which tracks come, what the audio is."""

    stream_sid: str = ""
    account_sid: str = ""
    call_sid: str = ""
    tracks: tuple[str, ...] = ("inbound",)
    custom_parameters: dict[str, str] = {}
    media_format: MediaFormat = MediaFormat()


class MediaBody(msgspec.Struct, frozen=True, rename="camel"):
    """A ``media`` message's body: the audio, and from the caller its track, chunk number and timestamp (ms
    since the stream started), as strings."""

    payload: str
    track: str | None = None
    chunk: str | None = None
    timestamp: str | None = None


class DtmfBody(msgspec.Struct, frozen=True):
    """A key the caller pressed."""

    digit: str
    track: str | None = None


class MarkBody(msgspec.Struct, frozen=True):
    """A mark's name: the bot's own, echoed by the caller."""

    name: str


class StopInfo(msgspec.Struct, frozen=True, rename="camel"):
    """A ``stop``'s body: the call that ended."""

    account_sid: str = ""
    call_sid: str = ""


class _Event(msgspec.Struct, frozen=True, tag_field="event", rename="camel"):
    """What every Media Streams message is: a JSON object whose ``event`` names its struct."""


class ConnectedEvent(_Event, tag="connected", frozen=True):
    """Caller -> bot, first: the protocol the stream speaks."""

    protocol: str = "Call"
    version: str = "1.0.0"


class StartEvent(_Event, tag="start", frozen=True):
    """Caller -> bot, once after ``connected``: the stream's ids and its audio format."""

    start: StartInfo
    stream_sid: str = ""
    sequence_number: str | None = None


class MediaEvent(_Event, tag="media", frozen=True):
    """Both ways: audio. As it arrives it is read into ``Sound``; this is what is sent."""

    media: MediaBody
    stream_sid: str | None = None
    sequence_number: str | None = None


class DtmfEvent(_Event, tag="dtmf", frozen=True):
    """Caller -> bot: a key pressed."""

    dtmf: DtmfBody
    stream_sid: str | None = None
    sequence_number: str | None = None


class MarkEvent(_Event, tag="mark", frozen=True):
    """Bot -> caller: a mark after the audio sent so far; caller -> bot: that audio has played (or was cleared)."""

    mark: MarkBody
    stream_sid: str | None = None
    sequence_number: str | None = None


class ClearEvent(_Event, tag="clear", frozen=True):
    """Bot -> caller: drop the audio queued and not yet played (the bot was interrupted)."""

    stream_sid: str | None = None


class StopEvent(_Event, tag="stop", frozen=True):
    """Caller -> bot, last: the call ended."""

    stop: StopInfo = StopInfo()
    stream_sid: str | None = None
    sequence_number: str | None = None


class Sound(msgspec.Struct, frozen=True):
    """A ``media`` message as it arrived: its mu-law audio, decoded from base64 once, and the caller's chunk
    number, timestamp (ms) and sequence number where it sent them."""

    ulaw: bytes
    stream_sid: str | None = None
    track: str | None = None
    chunk: int | None = None
    timestamp_ms: int | None = None
    sequence: int | None = None  # the message's ``sequenceNumber``, where it carried one

    @property
    def samples(self) -> int:
        return len(self.ulaw)


class OtherEvent(msgspec.Struct, frozen=True):
    """An event the lab does not act on."""

    event: str


AnyEvent = ConnectedEvent | StartEvent | MediaEvent | DtmfEvent | MarkEvent | ClearEvent | StopEvent
KNOWN_EVENTS: Final = frozenset(str(cls.__struct_config__.tag) for cls in AnyEvent.__args__)
Arrived = ConnectedEvent | StartEvent | Sound | DtmfEvent | MarkEvent | ClearEvent | StopEvent | OtherEvent
Inbound = Arrived | Malformed


class _Envelope(msgspec.Struct):
    event: str


_DECODE: Final = msgspec.json.Decoder(AnyEvent)
_ENVELOPE: Final = msgspec.json.Decoder(_Envelope)


def read(data: str | bytes) -> Inbound:
    """What one WebSocket message holds: an event (its audio decoded), ``OtherEvent``, or ``Malformed``."""
    try:
        return decode(data)
    except ProtocolError as exc:
        return Malformed.of(exc)


def decode(data: str | bytes) -> Arrived:
    """``read`` for an end that fails on what does not read (a ``ProtocolError`` saying what was wrong)."""
    if isinstance(data, bytes):
        raise ProtocolError("a binary message: Media Streams messages are JSON text")
    if len(data) > MOST_CHARS:
        raise ProtocolError(f"too large a message: {len(data)} characters, at most {MOST_CHARS}")
    try:
        event = _DECODE.decode(data)
    except msgspec.ValidationError as exc:
        name = _envelope(data)
        if name in KNOWN_EVENTS:
            raise ProtocolError(f"a {name} message that does not read: {exc}") from None
        return OtherEvent(name)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"malformed JSON: {str(exc)[:120]}") from None
    return sound(event) if isinstance(event, MediaEvent) else event


def sound(message: MediaEvent) -> Sound:
    """A media message's audio, decoded and bounded; ``ProtocolError`` where it is not strict base64, is too
    long, or its chunk or timestamp is not a whole number."""
    body = message.media
    if len(body.payload) > (MOST_AUDIO_BYTES + 2) // 3 * 4:
        raise ProtocolError(f"too much audio in a media message: over {MOST_AUDIO_BYTES} bytes")
    try:
        ulaw = base64.b64decode(body.payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProtocolError(f"a media payload that is not base64: {exc}") from None
    return Sound(
        ulaw,
        message.stream_sid,
        body.track,
        _whole("chunk", body.chunk),
        _whole("timestamp", body.timestamp),
        _whole("sequence number", message.sequence_number),
    )


def _whole(name: str, text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise ProtocolError(f"a media {name} that is not a whole number: {text[:20]!r}")
    return int(text)


def _envelope(data: str) -> str:
    try:
        return _ENVELOPE.decode(data).event
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
        raise ProtocolError(f"not a JSON object with a string 'event': {str(exc)[:120]}") from None


def encode(message: AnyEvent) -> str:
    """The message as the wire carries it: compact JSON, camelCase, fields that are ``None`` left out."""
    return msgspec.json.encode(_kept(msgspec.to_builtins(message))).decode("utf-8")


def media(
    stream_sid: str, ulaw: bytes, chunk: int | None = None, timestamp_ms: int | None = None, sequence: int | None = None
) -> MediaEvent:
    """A media message of ``ulaw`` audio; the caller's numbers it where given (a bot's media carries none)."""
    return MediaEvent(
        MediaBody(
            base64.b64encode(ulaw).decode("ascii"),
            "inbound" if chunk is not None else None,
            None if chunk is None else str(chunk),
            None if timestamp_ms is None else str(timestamp_ms),
        ),
        stream_sid,
        None if sequence is None else str(sequence),
    )


def _kept(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _kept(v) for k, v in value.items() if v is not None}
    return value
