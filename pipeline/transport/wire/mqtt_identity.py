"""Who a xiaozhi MQTT device is, and how it proves it: the MQTT gateway's client id and signed password.

The OTA answer's ``mqtt`` section gives a device its MQTT client id ``GROUP@@@MAC@@@UUID`` (the
MAC's colons as underscores), a username (base64 of a JSON object: user data the OTA chose) and a
password: base64 of HMAC-SHA256 over ``client_id + "|" + username`` with the gateway's signature
key (xiaozhi-mqtt-gateway ``utils/mqtt_config_v2.js``: ``generateMqttConfig`` makes the section,
``validateMqttCredentials`` checks it). The server pushes its replies to ``devices/p2p/MAC`` (the
client id's second part) and the device publishes everything to ``device-server``. The lab's
MQTT front end, its OTA answer and the emulator's MQTT link all take these from here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass, field
from typing import Any

from pipeline.transport.wire import mqtt_packets
from pipeline.transport.wire.ota import MqttSection

GROUP = "GID_test"  # the gateway's own example group (mqtt_config_v2.js); the gateway accepts any
PUBLISH_TOPIC = "device-server"
SUBSCRIBE_TOPIC = "null"  # a string, not JSON null: older firmware fails without the field (the gateway's comment)
KEEPALIVE_S = 240  # the firmware's keep-alive when the OTA names none (mqtt_protocol.cc)
# the firmware's id is about 60 characters (GROUP@@@MAC@@@UUID); MQTT lets a server refuse long ones
MAX_CLIENT_ID_CHARS = 256
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")  # what the gateway asks of a legacy two-part client id


class CredentialError(ValueError):
    """A CONNECT the server refuses; ``code`` is the CONNACK return code that says why."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class DeviceIdentity:
    """A connected device as its client id names it."""

    group: str
    mac: str  # with colons, as the device's Device-Id
    uuid: str  # "" for a legacy two-part client id
    user_data: dict[str, Any] = field(default_factory=dict)

    @property
    def reply_topic(self) -> str:
        return reply_topic(self.mac)


def client_id(group: str, mac: str, uuid: str) -> str:
    return f"{group}@@@{mac.replace(':', '_')}@@@{uuid}"


def reply_topic(mac: str) -> str:
    """Where the server pushes a device's messages; the device never subscribes to it."""
    return f"devices/p2p/{mac.replace(':', '_')}"


def username(user_data: dict[str, Any]) -> str:
    """Base64 of the user data as JSON.stringify writes it (compact, non-ASCII kept)."""
    text = json.dumps(user_data, ensure_ascii=False, separators=(",", ":"))
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def password(client: str, user: str, key: str) -> str:
    """The signature the gateway checks; "" when there is no key (the gateway then checks nothing)."""
    if not key:
        return ""
    digest = hmac.new(key.encode("utf-8"), f"{client}|{user}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def check(client: str, user: str, given_password: str, key: str) -> DeviceIdentity:
    """The device a CONNECT names, or ``CredentialError``. With a key, the password must be the signature;
    without one, nothing is checked, as the gateway does when MQTT_SIGNATURE_KEY is unset."""
    if len(client) > MAX_CLIENT_ID_CHARS or not client.isprintable():  # it is logged, and a session's key
        raise CredentialError(
            mqtt_packets.IDENTIFIER_REJECTED,
            f"the client id is over {MAX_CLIENT_ID_CHARS} characters or holds control characters",
        )
    parts = client.split("@@@")
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise CredentialError(mqtt_packets.IDENTIFIER_REJECTED, "the client id is not GROUP@@@MAC@@@UUID")
    # the gateway checks no password on a legacy two-part id; the lab does whenever it has a key, so that
    # no one bypasses the signature by dropping the UUID
    if key and not hmac.compare_digest(given_password.encode(), password(client, user, key).encode()):
        raise CredentialError(mqtt_packets.BAD_CREDENTIALS, "the password is not the client id's signature")
    mac = parts[1].replace("_", ":")
    if len(parts) == 2:
        if not _MAC.match(mac):
            raise CredentialError(mqtt_packets.IDENTIFIER_REJECTED, f"{mac!r} is not a lower-case MAC address")
        return DeviceIdentity(parts[0], mac, "")
    return DeviceIdentity(parts[0], mac, parts[2], _user_data(user))


def _user_data(user: str) -> dict[str, Any]:
    try:
        data = json.loads(base64.b64decode(user, validate=True))
    except (binascii.Error, ValueError):
        data = None
    if not isinstance(data, dict):
        raise CredentialError(mqtt_packets.BAD_CREDENTIALS, "the username is not base64 of a JSON object")
    return data


@dataclass(frozen=True, slots=True)
class MqttConfig:
    """An OTA answer's ``mqtt`` section: what a device connects with."""

    endpoint: str  # HOST:PORT; a bare HOST means port 8883 with TLS to the firmware
    client_id: str
    username: str
    password: str = field(repr=False)
    publish_topic: str = PUBLISH_TOPIC
    keepalive_s: int = KEEPALIVE_S

    def section(self, port: int) -> MqttSection:
        """The section as the gateway's generateMqttConfig writes it; ``port`` is where MQTT really listens
        (the gateway writes a fixed 8883, which firmware ignores: it reads the endpoint's port)."""
        return MqttSection(
            endpoint=self.endpoint,
            port=port,
            client_id=self.client_id,
            username=self.username,
            password=self.password,
            publish_topic=self.publish_topic,
            subscribe_topic=SUBSCRIBE_TOPIC,
        )

    @classmethod
    def of(cls, section: MqttSection) -> MqttConfig:
        """A section as an OTA server answered it (``wire.ota.read_answer`` checked its fields' types)."""
        keepalive = section.keepalive
        return cls(
            section.endpoint,
            section.client_id,
            section.username,
            section.password,
            section.publish_topic or PUBLISH_TOPIC,
            keepalive if isinstance(keepalive, int) and keepalive >= 0 else KEEPALIVE_S,
        )

    def host_port(self) -> tuple[str, int]:
        """Where to connect, read from the endpoint as the firmware reads it (mqtt_protocol.cc)."""
        host, sep, port = self.endpoint.rpartition(":")
        if not sep or not port.isdigit():
            return self.endpoint, 8883
        return host.strip("[]"), int(port)


def device_config(
    endpoint: str, mac: str, uuid: str, key: str, group: str = GROUP, user_data: dict[str, Any] | None = None
) -> MqttConfig:
    """The config the gateway's OTA would give this device (generateMqttConfig)."""
    client = client_id(group, mac, uuid)
    user = username(user_data or {})
    return MqttConfig(endpoint, client, user, password(client, user, key))
