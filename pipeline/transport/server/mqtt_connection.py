"""One device's MQTT connection to the lab's MQTT front end: CONNECT, then its packets, as the xiaozhi gateway.

- A device connects with client id ``GROUP@@@MAC@@@UUID`` (or a legacy ``GROUP@@@MAC``), a base64
  JSON username and, when a signature key is set, the signed password (``wire.mqtt_identity``); a
  refused CONNECT is answered with the CONNACK code that says why, then closed.
- It publishes every JSON message to one topic, at QoS 0 (a QoS above 0 closes the connection; the
  topic itself is not checked, as the gateway does not). It never subscribes: our messages go to
  ``devices/p2p/MAC`` all the same. A SUBSCRIBE is answered with a SUBACK and changes nothing.
- Its hello must say ``version: 3`` (else the connection closes) and opens a session with a fresh
  key and nonce; a repeated hello ends the open session and opens a new one (firmware says hello
  again, without a goodbye, when its channel timed out). ``goodbye`` and ``udp_timeout`` end the
  session with our goodbye; any other message without a session is answered with a goodbye naming
  the session id it gave. A payload that is not JSON closes the connection, as in the gateway; a
  known message that does not read is the session's to count.
- No packet within 1.5 times the keep-alive the CONNECT asked for closes the connection
  (``mqtt-protocol.js``); a CONNECT that asks for none gets ``max_idle_s``, where the gateway would
  wait for ever. A packet over ``max_packet_bytes`` closes it, a send that cannot go out within
  ``write_timeout_s`` too, and every packet is metered by the connection's flood guard, hellos included.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

from pipeline.clock import Clock
from pipeline.transport.server.flood import Flooded, FloodGuard
from pipeline.transport.server.mqtt_channel import HELLO_VERSION, MqttUdpChannel
from pipeline.transport.server.server_settings import DoorSettings, SessionSettings
from pipeline.transport.wire import mqtt_packets as mp
from pipeline.transport.wire.failures import ChannelGone, ProtocolError
from pipeline.transport.wire.messages import (
    Goodbye,
    Hello,
    Malformed,
    Message,
    NotAMessage,
    Other,
    UdpTimeout,
    decode,
    encode,
)
from pipeline.transport.wire.mqtt_identity import CredentialError, DeviceIdentity, check

KEEPALIVE_FACTOR = 1.5  # mqtt-protocol.js parseConnect: keepAlive * 1000 * 1.5
NOT_AUTHORIZED = 5  # MQTT 3.1.1's CONNACK return code 5
REFUSALS = {  # why the front end had no room, by the CONNACK code it answered
    mp.IDENTIFIER_REJECTED: "a device with this client id is connected",
    mp.SERVER_UNAVAILABLE: "the MQTT front end is full",
    NOT_AUTHORIZED: "not an allowed device",
}


class Hangup(Exception):
    """The connection is to be closed: what the device did, for a test or a log to see."""


class MqttFront(Protocol):
    """What a connection needs of the front end that accepted it."""

    max_packet_bytes: int
    connect_timeout_s: float
    signature_key: str
    door: DoorSettings
    session: SessionSettings
    clock: Clock

    def room_for(self, connection: MqttConnection) -> int:
        """``mp.ACCEPTED``, or the CONNACK code refusing a connection the front end has no room for."""

    def joined(self, connection: MqttConnection) -> None: ...

    def left(self, connection: MqttConnection) -> None: ...

    def open_session(self, connection: MqttConnection) -> MqttUdpChannel: ...


class MqttConnection:
    """One device's MQTT connection: CONNECT, then its packets until it leaves, breaks a rule or goes quiet."""

    def __init__(self, front: MqttFront, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.front, self.reader, self.writer = front, reader, writer
        self.address = str((writer.get_extra_info("peername") or ("",))[0])
        self.device = DeviceIdentity("", "", "")
        self.client_id = ""
        self.keep_alive_s = 0
        self.channel: MqttUdpChannel | None = None
        self.guard = FloodGuard(front.session.flood, front.clock)  # the connection's, whatever its sessions
        self.open = False
        self.why_closed = ""

    async def run(self) -> None:
        try:
            await self._connect()
            await self._packets()
        except (Hangup, mp.PacketProblem, ChannelGone, Flooded) as exc:
            self.why_closed = str(exc)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError) as exc:
            self.why_closed = f"{type(exc).__name__}: {exc}"
        finally:
            self.hang_up()
            with contextlib.suppress(ConnectionError, TimeoutError):
                async with asyncio.timeout(self.front.door.write_timeout_s):
                    await self.writer.wait_closed()

    async def _connect(self) -> None:
        async with asyncio.timeout(self.front.connect_timeout_s):
            packet = await mp.read_packet(self.reader, self.front.max_packet_bytes)
        if packet is None or packet.kind != mp.CONNECT:
            raise Hangup("the first packet is not CONNECT")
        connect = mp.parse_connect(packet)
        if connect.protocol_level not in (3, 4):
            await self._send(mp.connack(mp.UNACCEPTABLE_PROTOCOL))
            raise Hangup(f"MQTT protocol level {connect.protocol_level}")
        try:
            self.device = check(connect.client_id, connect.username, connect.password, self.front.signature_key)
        except CredentialError as exc:
            await self._send(mp.connack(exc.code))
            raise Hangup(str(exc)) from None
        self.client_id, self.keep_alive_s = connect.client_id, connect.keep_alive_s
        refused = self.front.room_for(self)
        if refused != mp.ACCEPTED:
            await self._send(mp.connack(refused))
            raise Hangup(REFUSALS.get(refused, f"refused with CONNACK {refused}"))
        self.open = True
        self.front.joined(self)
        await self._send(mp.connack(mp.ACCEPTED))

    async def _packets(self) -> None:
        quiet_s = self.keep_alive_s * KEEPALIVE_FACTOR if self.keep_alive_s else self.front.door.max_idle_s
        while True:
            try:
                async with asyncio.timeout(quiet_s):
                    packet = await mp.read_packet(self.reader, self.front.max_packet_bytes)
            except TimeoutError:
                raise Hangup(f"no packet within {quiet_s:g} s (keep-alive {self.keep_alive_s} s)") from None
            if packet is None or packet.kind == mp.DISCONNECT:
                return
            await self._packet(packet)

    async def _packet(self, packet: mp.MqttPacket) -> None:
        """One packet; what the connection answers itself is metered here, what a session reads by the session."""
        if packet.kind == mp.PUBLISH:
            await self._publish(mp.parse_publish(packet))
            return
        self.guard.control()
        if packet.kind == mp.SUBSCRIBE:
            packet_id, filters = mp.parse_subscribe(packet)
            await self._send(mp.suback(packet_id, [0] * len(filters)))  # granted, and nothing changes
        elif packet.kind == mp.PINGREQ:
            await self._send(mp.PINGRESP_PACKET)
        else:
            raise Hangup(f"MQTT packet type {packet.kind}, which a device does not send")

    async def _publish(self, publish: mp.Publish) -> None:
        if publish.qos != 0:
            raise Hangup(f"a PUBLISH at QoS {publish.qos}")
        try:
            message: Message | Other | Malformed = decode(publish.payload)
        except NotAMessage as exc:
            raise Hangup(f"a PUBLISH whose payload is no JSON message: {exc}") from None
        except ProtocolError as exc:
            message = Malformed.of(exc)
        channel = self.channel if self.channel is not None and not self.channel.closed else None
        if channel is None or isinstance(message, Hello | Goodbye | UdpTimeout):
            self.guard.control()
        if isinstance(message, Hello):
            if message.version != HELLO_VERSION:
                raise Hangup(f"hello version {message.version!r} over MQTT, not {HELLO_VERSION}")
            if channel is not None:
                # the device gave up on that session: it is told nothing (firmware cleared its session id
                # before this hello, so it would ignore a goodbye naming the old one), and the new session
                # gets a fresh key and sequence check, as the gateway gives each hello; the firmware's
                # packet sequence starts again at each server hello (mqtt_protocol.cc ParseServerHello)
                channel.end()
            self.channel = self.front.open_session(self)
            await self.channel.control(message)
        elif channel is None:
            if not isinstance(message, Goodbye):  # app.js parseOtherMessage: no session, so none to go on with
                await self.publish(Goodbye(session_id=getattr(message, "session_id", None) or ""))
        elif isinstance(message, Goodbye):
            await channel.close(1000, "goodbye")
        elif isinstance(message, UdpTimeout):  # the device heard no audio: the gateway ends the session
            await channel.close(1000, "udp_timeout")
        else:
            await channel.control(message)

    async def publish(self, message: Message) -> None:
        """A message pushed to the device's reply topic, subscribed to or not."""
        if not self.open:
            raise ChannelGone(f"the MQTT connection of {self.device.mac} is closed")
        await self._send(mp.publish(self.device.reply_topic, encode(message).encode("utf-8")))

    async def _send(self, data: bytes) -> None:
        try:
            self.writer.write(data)
            async with asyncio.timeout(self.front.door.write_timeout_s):
                await self.writer.drain()
        except (ConnectionError, TimeoutError) as exc:
            self.hang_up(abort=True)
            raise ChannelGone(f"the MQTT connection of {self.device.mac} is gone ({exc!r})") from None

    def hang_up(self, abort: bool = False) -> None:
        """Closes the connection and ends its session (the device cannot be told anything any more); ``abort``
        drops what is unsent, for a device that stopped reading."""
        self.open = False
        if self.channel is not None:
            self.channel.end()
        self.front.left(self)
        if abort:
            self.writer.transport.abort()
        else:
            self.writer.close()
