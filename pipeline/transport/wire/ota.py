"""The xiaozhi OTA exchange, typed: what a device POSTs at boot and the answer that says where to connect.

A firmware POSTs its system information (firmware ``main/ota.cc`` ``CheckVersion``: the
``application`` name and version among much else, which is ignored here) and reads from the answer
the ``server_time``, the ``firmware`` offered, an ``activation`` challenge where the server wants
one, and either a ``websocket`` section (``url``, ``token``) or an ``mqtt`` one (the xiaozhi MQTT
gateway's ``generateMqttConfig``); xiaozhi-esp32-server sends one or the other, never both
(``ota_handler.py``). A section the server leaves out is ``UNSET`` and absent when encoded.
``read_answer`` refuses an answer that does not read with an ``OtaAnswerError`` naming the field.
"""

from __future__ import annotations

from typing import Final

import msgspec
from msgspec import UNSET, UnsetType

from pipeline.transport.wire.failures import ProtocolError


class Application(msgspec.Struct, frozen=True, kw_only=True):
    """The firmware a device runs: its name and version (the OTA request's ``application``)."""

    name: str = ""
    version: str = ""


class OtaRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A device's system information (its POST body); fields the lab does not use are ignored."""

    application: Application = Application()
    mac_address: str | UnsetType = UNSET
    uuid: str | UnsetType = UNSET


class ServerTime(msgspec.Struct, frozen=True, kw_only=True):
    """The server's clock, which the firmware sets its own by."""

    timestamp: int  # ms since the epoch
    timezone_offset: int = 0  # minutes, added by the firmware to set its local clock


class Firmware(msgspec.Struct, frozen=True, kw_only=True):
    """The firmware offered: the device's own version and no URL means no update."""

    version: str
    url: str = ""


class WebsocketSection(msgspec.Struct, frozen=True, kw_only=True):
    """Where a device opens its WebSocket, and the token it presents there."""

    url: str
    token: str = ""


class MqttSection(msgspec.Struct, frozen=True, kw_only=True):
    """The gateway's ``mqtt`` section. ``port`` is informative (firmware reads the endpoint's port);
    ``subscribe_topic`` is the string ``"null"`` the gateway sends for older firmware."""

    endpoint: str
    port: int | UnsetType = UNSET
    client_id: str
    username: str = ""
    password: str = ""
    publish_topic: str = ""
    subscribe_topic: str | UnsetType | None = UNSET
    keepalive: int | UnsetType = UNSET


class Activation(msgspec.Struct, frozen=True, kw_only=True):
    """A server that wants the device activated first (the lab never asks)."""

    code: str | UnsetType = UNSET
    message: str | UnsetType = UNSET
    challenge: str | UnsetType = UNSET
    timeout_ms: int | UnsetType = UNSET


class OtaAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """The OTA answer: server time, the firmware offered, activation, and where the server is (MQTT or WebSocket)."""

    server_time: ServerTime | UnsetType = UNSET
    firmware: Firmware | UnsetType = UNSET
    activation: Activation | UnsetType = UNSET
    mqtt: MqttSection | UnsetType = UNSET
    websocket: WebsocketSection | UnsetType = UNSET


class OtaRefusal(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to a request the server refuses (xiaozhi-esp32-server's shape)."""

    success: bool = False
    message: str


class OtaAnswerError(ProtocolError):
    """An OTA answer that does not read; the text names the field."""


_ANSWER: Final = msgspec.json.Decoder(OtaAnswer)
_REQUEST: Final = msgspec.json.Decoder(OtaRequest)


def read_answer(data: bytes | str) -> OtaAnswer:
    """The answer ``data`` holds, or ``OtaAnswerError`` (``... - at `$.mqtt.endpoint` `` names the field)."""
    try:
        return _ANSWER.decode(data)
    except msgspec.ValidationError as exc:
        raise OtaAnswerError(f"the OTA's answer does not read: {_short(exc)}") from None
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise OtaAnswerError(f"the OTA's answer is not JSON: {_short(exc)}") from None


def read_request(data: bytes) -> OtaRequest | str:
    """A device's system information, or what is wrong with it; an empty body is none."""
    if not data.strip():
        return OtaRequest()
    try:
        return _REQUEST.decode(data)
    except msgspec.ValidationError as exc:
        if "`$" not in str(exc):
            return "the body is not a JSON object"
        return f"the body does not read as a device's system information: {_short(exc)}"
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return "the body is not JSON (a device sends its system information as a JSON object)"


def encode(value: OtaAnswer | OtaRequest | OtaRefusal) -> bytes:
    """Compact JSON, non-ASCII as UTF-8, ``UNSET`` fields left out."""
    return msgspec.json.encode(value)


def _short(exc: BaseException) -> str:
    return str(exc)[:200] or type(exc).__name__
