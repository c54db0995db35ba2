"""Pipecat's own wire: its protobuf ``Frame`` over WebSocket, typed, decoded once where it arrives.

A Pipecat bot behind its ``ProtobufFrameSerializer`` (``pipecat/frames/frames.proto``, package ``pipecat``) sends
and takes binary WebSocket messages, each one ``Frame``: a ``oneof`` of ``text``, ``audio`` (16-bit PCM with its
sample rate and channel count), ``transcription``, ``message`` (a JSON string: the bot's RTVI messages,
``{"label": "rtvi-ai", "type": "bot-started-speaking", ...}``, and the client's) and ``interruption``. The
schema is built here, field for field as Pipecat declares it, and read by the protobuf runtime (no generated
code, no copy of Pipecat's).

What arrives is decoded at the edge into one of the structs below, and bounded: a message over ``MOST_BYTES`` is
not parsed, audio over ``MOST_AUDIO_SECONDS`` or at an odd rate or channel count is refused, an RTVI message that
is not a JSON object with a string ``type`` is refused. Whatever does not read is a ``messages.Malformed`` naming
what was wrong, never an exception.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from pipeline.transport.wire.messages import Malformed

RATES: Final = (8000, 16000, 22050, 24000, 32000, 44100, 48000)  # what a bot's audio may be at
MOST_AUDIO_SECONDS: Final = 10  # as Twilio's wire: more in one message is an attack on the caller's memory
MOST_BYTES: Final = MOST_AUDIO_SECONDS * max(RATES) * 2 + 4096
RTVI_LABEL: Final = "rtvi-ai"

_FIELDS: Final = {  # message -> its fields as frames.proto declares them: (name, number, type)
    "TextFrame": (("id", 1, "uint64"), ("name", 2, "string"), ("text", 3, "string")),
    "AudioRawFrame": (
        *(("id", 1, "uint64"), ("name", 2, "string"), ("audio", 3, "bytes")),
        *(("sample_rate", 4, "uint32"), ("num_channels", 5, "uint32"), ("pts", 6, "uint64")),
    ),
    "TranscriptionFrame": (
        *(("id", 1, "uint64"), ("name", 2, "string"), ("text", 3, "string")),
        *(("user_id", 4, "string"), ("timestamp", 5, "string")),
    ),
    "MessageFrame": (("data", 1, "string"),),
    "InterruptionFrame": (("id", 1, "uint64"), ("name", 2, "string")),
}
_ONEOF: Final = (  # Frame's oneof "frame": (field, number, message)
    ("text", 1, "TextFrame"),
    ("audio", 2, "AudioRawFrame"),
    ("transcription", 3, "TranscriptionFrame"),
    ("message", 4, "MessageFrame"),
    ("interruption", 5, "InterruptionFrame"),
)


def _schema() -> Any:
    """The ``pipecat.Frame`` message class, from a descriptor built as frames.proto declares it."""
    proto = descriptor_pb2.FileDescriptorProto(name="lab/pipecat_frames.proto", package="pipecat", syntax="proto3")
    kinds = {
        "uint64": descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
        "uint32": descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
        "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
    }
    optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    for name, fields in _FIELDS.items():
        message = proto.message_type.add(name=name)
        for field, number, kind in fields:
            message.field.add(name=field, number=number, type=kinds[kind], label=optional)
    frame = proto.message_type.add(name="Frame")
    frame.oneof_decl.add(name="frame")
    for field, number, kind in _ONEOF:
        frame.field.add(
            name=field,
            number=number,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
            type_name=f".pipecat.{kind}",
            label=optional,
            oneof_index=0,
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("pipecat.Frame"))


Frame: Final = _schema()


@dataclass(frozen=True, slots=True)
class BotAudio:
    """Audio the bot sent: 16-bit PCM, mono, at ``rate``."""

    pcm: np.ndarray
    rate: int


@dataclass(frozen=True, slots=True)
class RtviEvent:
    """An RTVI message: its ``type`` (``bot-started-speaking``...) and its ``data`` (an object, or empty)."""

    kind: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BotText:
    """A ``text`` or ``transcription`` frame: what the bot sent as words (``transcription``: True for the latter)."""

    text: str
    transcription: bool


@dataclass(frozen=True, slots=True)
class Interruption:
    """The bot's ``interruption`` frame: it stopped talking."""


Received = BotAudio | RtviEvent | BotText | Interruption


def read(data: bytes | str) -> Received | Malformed:
    """One WebSocket message from the bot, decoded, or what was wrong with it."""
    if isinstance(data, str):
        return Malformed("text_message", "a text message where Pipecat's wire sends binary frames")
    if len(data) > MOST_BYTES:
        return Malformed("too_large", f"{len(data)} bytes, over {MOST_BYTES}")
    frame = Frame()
    try:
        frame.ParseFromString(data)
    except DecodeError as exc:
        return Malformed("bad_protobuf", str(exc) or "not a pipecat.Frame")
    which = frame.WhichOneof("frame")
    if which == "audio":
        return _audio(frame.audio)
    if which == "message":
        return _rtvi(frame.message.data)
    if which in ("text", "transcription"):
        return BotText(getattr(frame, which).text, which == "transcription")
    if which == "interruption":
        return Interruption()
    return Malformed("empty_frame", "a Frame with none of its fields set")


def _audio(audio: Any) -> BotAudio | Malformed:
    rate, channels, raw = int(audio.sample_rate), int(audio.num_channels), bytes(audio.audio)
    if rate not in RATES:
        return Malformed("bad_audio", f"sample rate {rate}, not one of {', '.join(map(str, RATES))}")
    if channels not in (0, 1):  # 0: unset, which Pipecat's own client reads as mono
        return Malformed("bad_audio", f"{channels} channels, where the lab plays mono")
    if len(raw) % 2 or len(raw) > MOST_AUDIO_SECONDS * rate * 2:
        return Malformed("bad_audio", f"{len(raw)} bytes of 16-bit audio at {rate} Hz")
    return BotAudio(np.frombuffer(raw, dtype="<i2"), rate)


def _rtvi(text: str) -> RtviEvent | Malformed:
    try:
        item = json.loads(text)
    except ValueError as exc:
        return Malformed("bad_json", str(exc))
    if not isinstance(item, dict) or not isinstance(item.get("type"), str):
        return Malformed("bad_message", "a message that is not an object with a string type")
    data = item.get("data")
    return RtviEvent(item["type"], data if isinstance(data, dict) else {})


def audio(pcm: bytes, rate: int) -> bytes:
    """The caller's audio (16-bit PCM, mono, at ``rate``) as a ``Frame``, as Pipecat's clients send it."""
    frame = Frame()
    frame.audio.audio, frame.audio.sample_rate, frame.audio.num_channels = pcm, rate, 1
    data: bytes = frame.SerializeToString()
    return data


def message(kind: str, data: dict[str, Any] | None = None, msg_id: str = "") -> bytes:
    """An RTVI message (the client's ``client-ready``...; a bot's have the same shape) as a ``Frame``."""
    frame = Frame()
    body: dict[str, Any] = {"label": RTVI_LABEL, "type": kind, "id": msg_id}
    if data is not None:
        body["data"] = data
    frame.message.data = json.dumps(body)
    out: bytes = frame.SerializeToString()
    return out
