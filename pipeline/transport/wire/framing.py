"""The WebSocket transport's binary messages: one Opus packet each, bare or behind a header.

Protocol version 1 sends the packet bare; version 2 puts it behind a 16-byte header (u16
version, u16 type, u32 reserved, u32 timestamp in ms, u32 payload size) and version 3 behind a
4-byte one (u8 type, u8 reserved, u16 payload size), both big-endian as the firmware writes them
(``protocol.h``). The type says Opus (0) or a JSON control message sent as binary (1).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pipeline.transport.wire.failures import ProtocolError

VERSIONS = (1, 2, 3)
TYPE_OPUS = 0
TYPE_JSON = 1

_V2 = struct.Struct(">HHIII")  # version, type (0 opus, 1 json), reserved, timestamp_ms, payload size
_V3 = struct.Struct(">BBH")  # type, reserved, payload size


@dataclass(frozen=True, slots=True)
class Audio:
    """One Opus packet as it arrived, from a binary message or a UDP datagram."""

    opus: bytes
    timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class BinaryFrame:
    """One binary message, its header read: Opus, or (versions 2 and 3) a JSON message sent as binary."""

    kind: int
    payload: bytes
    timestamp_ms: int = 0


def pack(version: int, payload: bytes, timestamp_ms: int = 0, kind: int = TYPE_OPUS) -> bytes:
    """``payload`` as a binary message of the negotiated version."""
    if version == 1:
        return payload
    if version == 2:
        return _V2.pack(2, kind, 0, timestamp_ms & 0xFFFFFFFF, len(payload)) + payload
    if version == 3:
        return _V3.pack(kind, 0, len(payload)) + payload
    raise ProtocolError(f"protocol version {version} is not one of {VERSIONS}")


def unpack(version: int, data: bytes) -> BinaryFrame:
    """A binary message of the negotiated version; a header that disagrees with the data is a ``ProtocolError``."""
    if version == 1:
        return BinaryFrame(TYPE_OPUS, data)
    header = _V2 if version == 2 else _V3 if version == 3 else None
    if header is None:
        raise ProtocolError(f"protocol version {version} is not one of {VERSIONS}")
    if len(data) < header.size:
        raise ProtocolError(f"binary message of {len(data)} bytes is shorter than the version {version} header")
    if version == 2:
        _ver, kind, _reserved, timestamp, size = _V2.unpack_from(data)
    else:
        kind, _reserved, size = _V3.unpack_from(data)
        timestamp = 0
    payload = data[header.size :]
    if size != len(payload):
        raise ProtocolError(f"header says {size} payload bytes, the message holds {len(payload)}")
    if kind not in (TYPE_OPUS, TYPE_JSON):
        raise ProtocolError(f"binary message type {kind} is neither Opus (0) nor JSON (1)")
    return BinaryFrame(kind, payload, timestamp)
