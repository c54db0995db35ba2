"""The few MQTT 3.1.1 packets a xiaozhi device and its MQTT server exchange, read and written.

A firmware (``mqtt_protocol.cc``) sends CONNECT, PUBLISH at QoS 0, PINGREQ and DISCONNECT; it
never subscribes, though an MQTT client library may. Its server answers CONNACK, PUBLISH,
SUBACK and PINGRESP. That is all the xiaozhi MQTT gateway itself parses (``mqtt-protocol.js``),
and all this module knows: the lab's MQTT front end (``server.mqtt_front``) and the tests' recording
server build on it. Every packet is bounded by ``max_bytes`` before it is read, as the gateway's
``max_mqtt_payload_size`` bounds the whole packet.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

CONNECT, CONNACK, PUBLISH, PUBACK = 1, 2, 3, 4
SUBSCRIBE, SUBACK, UNSUBSCRIBE = 8, 9, 10
PINGREQ, PINGRESP, DISCONNECT = 12, 13, 14

# CONNACK return codes (MQTT 3.1.1 section 3.2.2.3)
ACCEPTED = 0
UNACCEPTABLE_PROTOCOL = 1
IDENTIFIER_REJECTED = 2
SERVER_UNAVAILABLE = 3  # the front end has no room for another connection
BAD_CREDENTIALS = 4


class PacketProblem(ValueError):
    """What came is no MQTT packet this server reads: the connection ends."""


@dataclass(frozen=True, slots=True)
class MqttPacket:
    """One MQTT packet as read: its type, the fixed header's flags, and the rest."""

    kind: int  # the fixed header's packet type
    flags: int  # its low four bits (a PUBLISH's DUP, QoS and RETAIN)
    body: bytes  # everything after the fixed header


@dataclass(frozen=True, slots=True)
class Connect:
    """A CONNECT packet's fields: who the device says it is, and its keep-alive."""

    protocol_level: int  # 3: MQTT 3.1, 4: 3.1.1
    keep_alive_s: int
    client_id: str
    username: str = ""
    password: str = field(default="", repr=False)
    clean_session: bool = True


@dataclass(frozen=True, slots=True)
class Publish:
    """A PUBLISH packet's fields: the topic, the payload (a JSON message from a device), and its QoS."""

    topic: str
    payload: bytes
    qos: int = 0
    packet_id: int | None = None


async def read_packet(reader: asyncio.StreamReader, max_bytes: int) -> MqttPacket | None:
    """The next packet, or None at a clean end of stream; a packet over ``max_bytes`` in all is refused
    from its length alone, before its body is read."""
    first = await reader.read(1)
    if not first:
        return None
    length, size_bytes = 0, 0
    for shift in range(0, 28, 7):
        digit = (await reader.readexactly(1))[0]
        length |= (digit & 0x7F) << shift
        size_bytes += 1
        if not digit & 0x80:
            break
    else:
        raise PacketProblem("the remaining length runs past four bytes")
    if 1 + size_bytes + length > max_bytes:
        raise PacketProblem(f"a packet of {1 + size_bytes + length} bytes is over the {max_bytes}-byte limit")
    body = await reader.readexactly(length) if length else b""
    return MqttPacket(first[0] >> 4, first[0] & 0x0F, body)


def encode(kind: int, flags: int, body: bytes) -> bytes:
    """A packet: fixed header (type, flags, remaining length) and body."""
    size, length = bytearray(), len(body)
    while True:
        digit, length = length & 0x7F, length >> 7
        size.append(digit | (0x80 if length else 0))
        if not length:
            break
    return bytes([kind << 4 | flags]) + bytes(size) + body


class _Reader:
    def __init__(self, body: bytes) -> None:
        self.body, self.at = body, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.body):
            raise PacketProblem("the packet ends inside a field")
        chunk = self.body[self.at : self.at + n]
        self.at += n
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def blob(self) -> bytes:
        return self.take(self.u16())

    def text(self) -> str:
        try:
            return self.blob().decode("utf-8")
        except UnicodeDecodeError:
            raise PacketProblem("a string field is not UTF-8") from None

    def rest(self) -> bytes:
        return self.take(len(self.body) - self.at)


def parse_connect(packet: MqttPacket) -> Connect:
    r = _Reader(packet.body)
    r.text()  # "MQTT" (3.1.1) or "MQIsdp" (3.1): the level tells them apart
    level, flags, keep_alive = r.u8(), r.u8(), r.u16()
    client_id = r.text()
    if flags & 0x04:  # a will: topic and message, which this server never sends on
        r.text()
        r.blob()
    username = r.text() if flags & 0x80 else ""
    password = r.blob().decode("utf-8", "replace") if flags & 0x40 else ""
    return Connect(level, keep_alive, client_id, username, password, bool(flags & 0x02))


def parse_publish(packet: MqttPacket) -> Publish:
    qos = packet.flags >> 1 & 0x03
    r = _Reader(packet.body)
    topic = r.text()
    packet_id = r.u16() if qos else None
    return Publish(topic, r.rest(), qos, packet_id)


def parse_subscribe(packet: MqttPacket) -> tuple[int, list[tuple[str, int]]]:
    """The packet id and each topic filter with the QoS asked for."""
    r = _Reader(packet.body)
    packet_id, filters = r.u16(), []
    while r.at < len(r.body):
        filters.append((r.text(), r.u8()))
    return packet_id, filters


def _string(value: str | bytes) -> bytes:
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return struct.pack(">H", len(raw)) + raw


def connect(c: Connect) -> bytes:
    flags = (0x02 if c.clean_session else 0) | (0x80 if c.username else 0) | (0x40 if c.password else 0)
    body = _string("MQTT") + bytes([c.protocol_level, flags]) + struct.pack(">H", c.keep_alive_s)
    body += _string(c.client_id)
    if c.username:
        body += _string(c.username)
    if c.password:
        body += _string(c.password)
    return encode(CONNECT, 0, body)


def connack(code: int) -> bytes:
    return encode(CONNACK, 0, bytes([0, code]))  # session present: never, no session outlives a connection


def publish(topic: str, payload: bytes, qos: int = 0, packet_id: int = 1) -> bytes:
    body = _string(topic) + (struct.pack(">H", packet_id) if qos else b"") + payload
    return encode(PUBLISH, qos << 1, body)


def subscribe(packet_id: int, topic: str) -> bytes:
    return encode(SUBSCRIBE, 0x02, struct.pack(">H", packet_id) + _string(topic) + b"\x00")


def suback(packet_id: int, granted: list[int]) -> bytes:
    return encode(SUBACK, 0, struct.pack(">H", packet_id) + bytes(granted))


PINGREQ_PACKET = encode(PINGREQ, 0, b"")
PINGRESP_PACKET = encode(PINGRESP, 0, b"")
