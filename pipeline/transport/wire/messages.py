"""The xiaozhi control messages, typed, decoded once where they arrive and encoded where they leave.

Control messages are JSON objects with a string ``type`` (docs/reference/cited.md, protocol facts). Each
type the lab acts on is a struct below, its docstring saying who sends it to whom; fields a
struct does not name are ignored, because firmware, servers and clients add them freely. A type
no struct names decodes to ``Other`` (tolerated and counted, never an error). Everything else that
arrives as a control message (not JSON, not an object, no string ``type``, a known type with a
field of the wrong type, nesting deeper than the decoder follows) is a ``ProtocolError`` naming
what was wrong; the ends turn it into a counted ``Malformed`` item or a close with that reason.

A field that may be absent on the wire is ``None`` by default and left out when encoded, so what
the lab sends is what the real parts send: ``""`` is sent, ``None`` is not; every other field is
sent whatever its value.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from pipeline.events import FRAME_MS, SAMPLE_RATE
from pipeline.transport.wire import mcp
from pipeline.transport.wire.failures import ProtocolError

FRAME_DURATIONS = (20, 40, 60)  # uplink packet sizes a device may announce; the server re-frames to 60
LISTEN_MODES = ("auto", "manual", "realtime")


class AudioParams(msgspec.Struct, frozen=True):
    """A hello's ``audio_params``: what each side encodes. The server echoes the device's."""

    format: str = "opus"
    sample_rate: int = SAMPLE_RATE
    channels: int = 1
    frame_duration: int = FRAME_MS


LAB_AUDIO = AudioParams()


class Features(msgspec.Struct, frozen=True, omit_defaults=True):
    """A device hello's ``features``: ``mcp`` says the device serves its own tools over MCP."""

    mcp: bool = False
    aec: bool = False


class UdpParams(msgspec.Struct, frozen=True, kw_only=True):
    """The ``udp`` object of an MQTT server's hello: where the device sends audio, and its key and nonce (hex)."""

    server: str
    port: int
    encryption: str = "aes-128-ctr"
    key: str
    nonce: str


class _Message(msgspec.Struct, frozen=True, tag_field="type"):
    """What every control message is: a JSON object whose ``type`` names its struct."""


class Hello(_Message, tag="hello", frozen=True):
    """Device -> server: opens a session (``features``, no ``session_id``). Server -> device: the answer,
    with the session id, the audio parameters echoed, and over MQTT the ``udp`` channel."""

    version: int = 1
    transport: str = "websocket"
    audio_params: AudioParams | None = None
    features: Features | None = None
    session_id: str | None = None
    udp: UdpParams | None = None


class LabTag(msgspec.Struct, frozen=True):
    """The lab emulator's name for the question a ``listen start`` opens (real servers ignore the field)."""

    question_id: str = ""
    round: int = 0


class Listen(_Message, tag="listen", frozen=True):
    """Device -> server: ``start`` (in ``mode``), ``stop`` (manual mode), ``detect`` (typed ``text`` or a
    wake word). ``lab`` and ``traceparent`` are the lab emulator's, for a server of the lab's."""

    state: str
    mode: str | None = None
    text: str | None = None
    session_id: str | None = None
    lab: LabTag | None = None
    traceparent: str | None = None


class Lab(_Message, tag="lab", frozen=True):
    """Device (the lab's emulator) -> server: in realtime mode, the question about to be spoken."""

    state: str = "question"
    question_id: str = ""
    round: int = 0
    traceparent: str | None = None
    session_id: str | None = None


class Abort(_Message, tag="abort", frozen=True):
    """Device -> server: stop the answer (``reason`` ``wake_word_detected`` for the wake word, none for the button)."""

    session_id: str | None = None
    reason: str | None = None


class Mcp(_Message, tag="mcp", frozen=True):
    """Both ways: a JSON-RPC 2.0 ``payload`` of the device's MCP tools (the server asks, the device answers),
    typed by ``wire.mcp`` when the message is decoded (``NotJsonRpc`` for a payload that is none)."""

    payload: mcp.Payload = mcp.NotJsonRpc(reason="no payload")
    session_id: str | None = None


class _McpIn(_Message, tag="mcp", frozen=True):
    """An ``mcp`` message as it arrives: its payload kept as JSON for ``wire.mcp.read``, typed in ``decode``."""

    payload: msgspec.Raw = msgspec.Raw()
    session_id: str | None = None


class Goodbye(_Message, tag="goodbye", frozen=True):
    """Both ways over MQTT: the session ends (the firmware acts only on one naming its session)."""

    session_id: str | None = None
    code: int | None = None
    reason: str | None = None


class UdpTimeout(_Message, tag="udp_timeout", frozen=True):
    """Device -> MQTT server: no audio came over UDP for too long; the gateway ends the session."""

    session_id: str | None = None


class Stt(_Message, tag="stt", frozen=True):
    """Server -> device: what the server recognised."""

    text: str = ""
    session_id: str | None = None


class Llm(_Message, tag="llm", frozen=True):
    """Server -> device: the answer's emotion (an emoji ``text`` and its name), once per answer."""

    text: str = ""
    emotion: str | None = None
    session_id: str | None = None


class Tts(_Message, tag="tts", frozen=True):
    """Server -> device: ``start`` (the device speaks), ``sentence_start`` (with its ``text``, before the
    sentence's audio), ``stop`` (the answer is over)."""

    state: str
    session_id: str | None = None
    text: str | None = None


class ServerError(_Message, tag="error", frozen=True):
    """Server -> device: something the server could not do (the lab's: a turn it could not start)."""

    message: str = ""


Message = Hello | Listen | Lab | Abort | Mcp | Goodbye | UdpTimeout | Stt | Llm | Tts | ServerError
KNOWN_TYPES: Final = frozenset(str(cls.__struct_config__.tag) for cls in Message.__args__)
_Incoming = Hello | Listen | Lab | Abort | _McpIn | Goodbye | UdpTimeout | Stt | Llm | Tts | ServerError


class Other(msgspec.Struct, frozen=True):
    """A control message of a type the lab does not act on (``iot``, ``ping``, a server's ``alert``...)."""

    type: str
    state: str | None = None


class Malformed(msgspec.Struct, frozen=True):
    """What arrived as a control message or an audio frame and could not be read: ``what`` names the kind of
    problem (what an end counts by), ``reason`` says exactly what was wrong."""

    what: str
    reason: str

    @classmethod
    def of(cls, error: ProtocolError) -> Malformed:
        """What a ``ProtocolError`` said, counted by the words before its first colon."""
        return cls(str(error).split(":", 1)[0], str(error))


class _Envelope(msgspec.Struct):
    type: str
    state: Any = None


_DECODE: Final = msgspec.json.Decoder(_Incoming)
_ENVELOPE: Final = msgspec.json.Decoder(_Envelope)


class NotAMessage(ProtocolError):
    """What arrived is no control message at all: not JSON, or not an object with a string ``type``."""


def decode(data: str | bytes) -> Message | Other:
    """The message ``data`` holds; ``ProtocolError`` when it holds none (``NotAMessage``) or a known type
    does not read (see the module's rules)."""
    try:
        message = _DECODE.decode(data)
    except msgspec.ValidationError as exc:
        envelope = _envelope(data)
        if envelope.type in KNOWN_TYPES:
            raise ProtocolError(f"a {envelope.type} message that does not read: {exc}") from None
        return Other(envelope.type, envelope.state if isinstance(envelope.state, str) else None)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise NotAMessage(f"malformed JSON: {_short(exc)}") from None
    if isinstance(message, _McpIn):  # the payload typed here, once: JSON-RPC has no tag a decoder could follow
        return Mcp(payload=mcp.read(bytes(message.payload)), session_id=message.session_id)
    return message


def _envelope(data: str | bytes) -> _Envelope:
    try:
        return _ENVELOPE.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
        raise NotAMessage(f"not a JSON object with a string 'type': {_short(exc)}") from None


def read(data: str | bytes) -> Message | Other | Malformed:
    """``decode`` for an end that counts what it cannot read instead of failing on it."""
    try:
        return decode(data)
    except ProtocolError as exc:
        return Malformed.of(exc)


_NESTED = ("audio_params", "features", "udp", "lab")  # our structs inside a message; a payload is left whole


def encode(message: Message) -> str:
    """The message as the wire carries it: compact JSON, non-ASCII as UTF-8, fields that are ``None`` left out."""
    fields = msgspec.to_builtins(message)
    kept = {
        key: {k: v for k, v in value.items() if v is not None} if key in _NESTED else value
        for key, value in fields.items()
        if value is not None
    }
    return msgspec.json.encode(kept).decode("utf-8")


def kind(item: Message | Other) -> str:
    """``type`` and ``state`` as one label (``listen:start``), for counting what was received."""
    state = getattr(item, "state", None)
    name = item.type if isinstance(item, Other) else str(type(item).__struct_config__.tag)
    return f"{name}:{state}" if state else name


def check_audio_params(hello: Hello) -> AudioParams:
    """The device's audio parameters, to be echoed as the real server does (helloHandle.py); the lab's
    when it gave none. 16 kHz mono Opus in 20, 40 or 60 ms frames (desktop clients default to 20, the
    firmware to 60); anything else is a ``ProtocolError``."""
    params = hello.audio_params
    if params is None:
        return LAB_AUDIO
    for key in ("format", "sample_rate", "channels"):
        if getattr(params, key) != getattr(LAB_AUDIO, key):
            wanted = getattr(LAB_AUDIO, key)
            raise ProtocolError(f"audio_params.{key} = {getattr(params, key)!r}: only {wanted!r} is supported")
    if params.frame_duration not in FRAME_DURATIONS:
        allowed = ", ".join(map(str, FRAME_DURATIONS))
        raise ProtocolError(f"audio_params.frame_duration = {params.frame_duration!r}: one of {allowed} ms is expected")
    return params


def _short(exc: BaseException) -> str:
    return str(exc)[:120] or type(exc).__name__
