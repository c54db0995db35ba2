"""What one end makes of each thing that arrives, decoded once at the edge: a message, audio, or what was wrong.

Both ends read every WebSocket message, MQTT payload and UDP packet into one of these before
anything acts on it, so nothing past the edge reads JSON by key or parses a header again, and
nothing malformed gets further than a counted ``Malformed``.
"""

from __future__ import annotations

from pipeline.transport.wire.failures import ProtocolError
from pipeline.transport.wire.framing import TYPE_OPUS, Audio, unpack
from pipeline.transport.wire.messages import Malformed, Message, Other, read

Inbound = Message | Other | Audio | Malformed


def from_websocket(version: int, data: str | bytes) -> Inbound:
    """A WebSocket message: text is a control message; binary is audio, or JSON behind a version 2/3 header."""
    if isinstance(data, str):
        return read(data)
    try:
        frame = unpack(version, data)
    except ProtocolError as exc:
        return Malformed("a binary message that does not read", str(exc))
    if frame.kind == TYPE_OPUS:
        return Audio(frame.payload, frame.timestamp_ms)
    return read(frame.payload)
