"""The xiaozhi device protocol's messages and binary audio framing (REFERENCE.md, protocol facts).

Control messages are JSON objects with a ``type``; both ends must tolerate fields and
types they do not know, because firmware and servers add them freely. Audio is one
Opus packet per binary message: bare in protocol version 1, behind a 16-byte header
in version 2 and a 4-byte header in version 3.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

SAMPLE_RATE = 16000
FRAME_MS = 60
VERSIONS = (1, 2, 3)
AUDIO_PARAMS = {"format": "opus", "sample_rate": SAMPLE_RATE, "channels": 1, "frame_duration": FRAME_MS}
FRAME_DURATIONS = (20, 40, 60)  # uplink packet sizes a device may announce; the server re-frames to 60
LISTEN_MODES = ("auto", "manual", "realtime")

_V2 = struct.Struct(">HHIII")  # version, type (0 opus, 1 json), reserved, timestamp_ms, payload size
_V3 = struct.Struct(">BBH")  # type, reserved, payload size
TYPE_OPUS = 0
TYPE_JSON = 1


class ProtocolError(ValueError):
    """A message the protocol does not allow; the text says what was wrong."""


class ChannelGone(Exception):
    """The other end of a device session is gone: nothing more can be sent or received."""


def parse(text: str | bytes) -> dict[str, Any]:
    """A control message as a dict with a string ``type``; anything else is a ``ProtocolError``."""
    try:
        message = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"malformed JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError("a message must be a JSON object with a string 'type'")
    return message


def dump(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def hello(transport: str = "websocket", session_id: str = "", **extra: Any) -> dict[str, Any]:
    """A hello: the device's (no session id) or the server's answer (with one); ``extra`` overrides fields."""
    message: dict[str, Any] = {"type": "hello", "version": 1, "transport": transport, "audio_params": AUDIO_PARAMS}
    if session_id:
        message["session_id"] = session_id
    message.update(extra)
    return message


def check_audio_params(message: dict[str, Any]) -> dict[str, Any]:
    """The device's audio parameters, to be echoed back as the real server does (helloHandle.py).

    16 kHz mono Opus in frames of 20, 40 or 60 ms (desktop clients default to 20, the firmware
    to 60); anything else is a ``ProtocolError``. A hello without them gets the lab's."""
    params = message.get("audio_params")
    if params is None:
        return dict(AUDIO_PARAMS)
    if not isinstance(params, dict):
        raise ProtocolError("audio_params must be an object")
    for key in ("format", "sample_rate", "channels"):
        if key in params and params[key] != AUDIO_PARAMS[key]:
            raise ProtocolError(f"audio_params.{key} = {params[key]!r}: only {AUDIO_PARAMS[key]!r} is supported")
    if "frame_duration" in params and params["frame_duration"] not in FRAME_DURATIONS:
        allowed = ", ".join(map(str, FRAME_DURATIONS))
        raise ProtocolError(
            f"audio_params.frame_duration = {params['frame_duration']!r}: one of {allowed} ms is expected"
        )
    return {**AUDIO_PARAMS, **params}


@dataclass(frozen=True, slots=True)
class Packet:
    """One binary message: an Opus packet, or (version 2 and 3) a JSON message sent as binary."""

    kind: int
    payload: bytes
    timestamp_ms: int = 0


def pack(version: int, payload: bytes, timestamp_ms: int = 0, kind: int = TYPE_OPUS) -> bytes:
    if version == 1:
        return payload
    if version == 2:
        return _V2.pack(2, kind, 0, timestamp_ms & 0xFFFFFFFF, len(payload)) + payload
    if version == 3:
        return _V3.pack(kind, 0, len(payload)) + payload
    raise ProtocolError(f"protocol version {version} is not one of {VERSIONS}")


def unpack(version: int, data: bytes) -> Packet:
    """A binary message of the negotiated version; a header that disagrees with the data is an error."""
    if version == 1:
        return Packet(TYPE_OPUS, data)
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
    return Packet(kind, payload, timestamp)
