"""The xiaozhi MQTT + UDP front end: an MQTT server for devices, control JSON over MQTT, audio over UDP.

It behaves as the xiaozhi MQTT gateway (xiaozhi-mqtt-gateway ``app.js``, ``mqtt-protocol.js``) does
towards a stock firmware, and feeds each device's session to a ``DeviceSession`` as the WebSocket
gateway does:

- A device connects with client id ``GROUP@@@MAC@@@UUID`` (or a legacy ``GROUP@@@MAC``), a base64
  JSON username and, when a signature key is set, the signed password (``mqtt_auth``); a refused
  CONNECT is answered with the CONNACK code that says why, then closed.
- It publishes every JSON message to one topic, at QoS 0 (a QoS above 0 closes the connection; the
  topic itself is not checked, as the gateway does not). It never subscribes: we push our messages
  to ``devices/p2p/MAC`` all the same. A SUBSCRIBE is answered with a SUBACK and changes nothing.
- Its hello must say ``version: 3`` (else the connection closes); ours answers with the UDP server,
  named by ``udp_public_host`` (never a wildcard bind address), ``encryption: aes-128-ctr``, and a
  fresh key and nonce whose ssrc routes the session's datagrams. A repeated hello ends the open
  session and opens a new one (firmware says hello again, without a goodbye, when its channel timed
  out). ``goodbye`` and ``udp_timeout`` end the session with our goodbye; any other message without
  a session is answered with a goodbye naming the session id it gave. Every goodbye names a session:
  firmware ignores any other. A payload that is not JSON closes the connection, as in the gateway.
- No packet within 1.5 times the keep-alive the CONNECT asked for closes the connection
  (``mqtt-protocol.js``), as does a packet over ``max_packet_bytes`` (the gateway's
  ``max_mqtt_payload_size``, 8 KiB). A second connection with the same client id replaces the first.
  A connection that ends ends its session.

Why a small server of our own rather than a broker: amqtt (the one kept asyncio MQTT broker) routes
only to subscriptions, acknowledges QoS 1 where the gateway closes, times keep-alive as keep-alive
plus a delay rather than 1.5 times, and pins websockets 15.0.1 below what the lab's WebSocket side
runs; bending it would mean its private internals. mqtt-codec, the packet codec on offer, is from
2019 and no longer builds. What a device speaks is six packet types (``mqtt_packets``), which the
gateway itself parses by hand, and owning them lets every rule above be the gateway's exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from pipeline.clock import Clock
from pipeline.tracing.timeline import PacketCounts
from pipeline.transport import mqtt_packets as mp
from pipeline.transport import protocol
from pipeline.transport.mqtt_auth import CredentialError, DeviceIdentity, check
from pipeline.transport.protocol import ChannelGone
from pipeline.transport.session import DeviceSession, SessionSettings, Turns
from pipeline.transport.udp import PacketCrypto, PacketError, SequenceCheck, ssrc_of

_END = object()
HELLO_VERSION = 3  # the gateway closes on any other (app.js handlePublish)
ENCRYPTION = "aes-128-ctr"
KEEPALIVE_FACTOR = 1.5  # mqtt-protocol.js parseConnect: keepAlive * 1000 * 1.5


@dataclass(frozen=True, slots=True)
class MqttGatewaySettings:
    host: str = "127.0.0.1"  # where the MQTT listener and the UDP socket bind
    port: int = 1883  # MQTT; 0: any free port
    udp_port: int = 0  # 0: any free port (the gateway uses the MQTT port's number)
    udp_public_host: str = ""  # what the hello tells devices; "": host, which must then not be 0.0.0.0 or ::
    signature_key: str = field(default="", repr=False)  # "": passwords are not checked
    max_packet_bytes: int = 8192  # the gateway's max_mqtt_payload_size: one whole packet
    connect_timeout_s: float = 10.0  # a connection that sends no CONNECT within this is closed
    session: SessionSettings = field(default_factory=SessionSettings)


class MqttUdpChannel:
    """One device's session: its MQTT connection's messages and its UDP packets, as a session's channel."""

    transport = "udp"

    def __init__(self, gateway: MqttGateway, connection: _Connection) -> None:
        self.gateway, self.connection = gateway, connection
        self.device_id = connection.device.mac
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        # the nonce is a header template: type 0x01, flags, length, a random ssrc, timestamp and sequence
        self.crypto = PacketCrypto(os.urandom(16), bytes([0x01, 0, 0, 0]) + os.urandom(4) + bytes(8))
        self.address: tuple[str, int] | None = None
        self.sequence = 0
        self.check = SequenceCheck()
        self.closed = False
        # the id the device was told in our hello; before that "", which is what firmware waiting
        # for its hello holds (mqtt_protocol.cc OpenAudioChannel), so it acts on that goodbye too
        self.session_id = ""

    # --- fed by the connection and the UDP socket ------------------------------

    def control(self, text: str) -> None:
        self.queue.put_nowait(text)

    def datagram(self, data: bytes, address: tuple[str, int]) -> None:
        try:
            packet = self.crypto.open(data)
        except PacketError:
            self.gateway.rejected_datagrams += 1
            return
        self.address = address
        if self.check.accept(packet.sequence):
            self.queue.put_nowait(protocol.Packet(protocol.TYPE_OPUS, packet.payload, packet.timestamp))

    # --- the session's side ---------------------------------------------------

    async def incoming(self) -> AsyncIterator[str | protocol.Packet]:
        while True:
            item = await self.queue.get()
            if item is _END:
                return
            yield item  # type: ignore[misc]

    async def send_json(self, message: dict[str, Any]) -> None:
        if self.closed:
            raise ChannelGone(f"session of {self.device_id} is closed")
        await self.connection.publish(message)

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None:
        if self.closed:
            raise ChannelGone(f"session of {self.device_id} is closed")
        if self.address is None:  # the device has not sent a packet yet: it cannot be reached
            return
        self.sequence += 1
        self.gateway.sendto(self.crypto.seal(opus, timestamp_ms, self.sequence), self.address)

    async def close(self, code: int, reason: str) -> None:
        if not self.closed:
            with contextlib.suppress(ChannelGone):
                goodbye = {"type": "goodbye", "session_id": self.session_id, "code": code, "reason": reason}
                await self.connection.publish(goodbye)
        self.end()

    def end(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(_END)
            self.gateway.forget(self)

    def hello_extra(self, session_id: str) -> dict[str, Any]:
        self.session_id = session_id
        host, port = self.gateway.public_host, self.gateway.udp_address[1]
        key, nonce = self.crypto.key.hex(), self.crypto.nonce.hex()
        udp = {"server": host, "port": port, "encryption": ENCRYPTION, "key": key, "nonce": nonce}
        return {"version": HELLO_VERSION, "udp": udp}

    def turn_started(self) -> None:
        self.check = self.check.next_turn()

    def packet_counts(self) -> PacketCounts | None:
        return PacketCounts(self.check.received, self.check.lost, self.check.late)


class _Hangup(Exception):
    """The connection is to be closed: what the device did, for a test or a log to see."""


class _Connection:
    """One device's MQTT connection: CONNECT, then its packets until it leaves, breaks a rule or goes quiet."""

    def __init__(self, gateway: MqttGateway, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.gateway, self.reader, self.writer = gateway, reader, writer
        self.device = DeviceIdentity("", "", "")
        self.client_id = ""
        self.keep_alive_s = 0
        self.channel: MqttUdpChannel | None = None
        self.open = False
        self.why_closed = ""

    async def run(self) -> None:
        try:
            await self._connect()
            await self._packets()
        except (_Hangup, mp.PacketProblem, ChannelGone) as exc:
            self.why_closed = str(exc)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError) as exc:
            self.why_closed = f"{type(exc).__name__}: {exc}"
        finally:
            self.hang_up()
            with contextlib.suppress(ConnectionError):
                await self.writer.wait_closed()

    async def _connect(self) -> None:
        s = self.gateway.settings
        async with asyncio.timeout(s.connect_timeout_s):
            packet = await mp.read_packet(self.reader, s.max_packet_bytes)
        if packet is None or packet.kind != mp.CONNECT:
            raise _Hangup("the first packet is not CONNECT")
        connect = mp.parse_connect(packet)
        if connect.protocol_level not in (3, 4):
            await self._send(mp.connack(mp.UNACCEPTABLE_PROTOCOL))
            raise _Hangup(f"MQTT protocol level {connect.protocol_level}")
        try:
            self.device = check(connect.client_id, connect.username, connect.password, s.signature_key)
        except CredentialError as exc:
            await self._send(mp.connack(exc.code))
            raise _Hangup(str(exc)) from None
        self.client_id, self.keep_alive_s = connect.client_id, connect.keep_alive_s
        self.open = True
        await self.gateway.joined(self)
        await self._send(mp.connack(mp.ACCEPTED))

    async def _packets(self) -> None:
        s = self.gateway.settings
        quiet_s = self.keep_alive_s * KEEPALIVE_FACTOR if self.keep_alive_s else None  # 0: never checked
        while True:
            try:
                async with asyncio.timeout(quiet_s):
                    packet = await mp.read_packet(self.reader, s.max_packet_bytes)
            except TimeoutError:
                raise _Hangup(f"no packet within {quiet_s:g} s (keep-alive {self.keep_alive_s} s)") from None
            if packet is None or packet.kind == mp.DISCONNECT:
                return
            await self._packet(packet)

    async def _packet(self, packet: mp.Packet) -> None:
        if packet.kind == mp.PUBLISH:
            await self._publish(mp.parse_publish(packet))
        elif packet.kind == mp.SUBSCRIBE:
            packet_id, filters = mp.parse_subscribe(packet)
            await self._send(mp.suback(packet_id, [0] * len(filters)))  # granted, and nothing changes
        elif packet.kind == mp.PINGREQ:
            await self._send(mp.PINGRESP_PACKET)
        else:
            raise _Hangup(f"MQTT packet type {packet.kind}, which a device does not send")

    async def _publish(self, publish: mp.Publish) -> None:
        if publish.qos != 0:
            raise _Hangup(f"a PUBLISH at QoS {publish.qos}")
        try:
            message = json.loads(publish.payload)
        except ValueError:
            raise _Hangup("a PUBLISH whose payload is not JSON") from None
        if not isinstance(message, dict):
            raise _Hangup("a PUBLISH whose payload is not a JSON object")
        kind, text = message.get("type"), publish.payload.decode("utf-8", "replace")
        channel = self.channel if self.channel is not None and not self.channel.closed else None
        if kind == "hello":
            if message.get("version") != HELLO_VERSION:
                raise _Hangup(f"hello version {message.get('version')!r} over MQTT, not {HELLO_VERSION}")
            if channel is not None:
                # the device gave up on that session: it is told nothing (firmware cleared its session id
                # before this hello, so it would ignore a goodbye naming the old one), and the new session
                # gets a fresh key and sequence check, as the gateway gives each hello; the firmware's
                # packet sequence starts again at each server hello (mqtt_protocol.cc ParseServerHello)
                channel.end()
            self.channel = self.gateway.open_session(self)
            self.channel.control(text)
        elif channel is None:
            if kind != "goodbye":  # app.js parseOtherMessage: no session, so none to go on with
                await self.publish({"type": "goodbye", "session_id": message.get("session_id", "")})
        elif kind == "udp_timeout":  # the device heard no audio: the gateway ends the session
            await channel.close(1000, "udp_timeout")
        else:  # goodbye included: the session answers it with ours
            channel.control(text)

    async def publish(self, message: dict[str, Any]) -> None:
        """A message pushed to the device's reply topic, subscribed to or not."""
        if not self.open:
            raise ChannelGone(f"the MQTT connection of {self.device.mac} is closed")
        await self._send(mp.publish(self.device.reply_topic, protocol.dump(message).encode("utf-8")))

    async def _send(self, data: bytes) -> None:
        try:
            self.writer.write(data)
            await self.writer.drain()
        except ConnectionError as exc:
            self.hang_up()
            raise ChannelGone(f"the MQTT connection of {self.device.mac} is gone ({exc})") from None

    def hang_up(self) -> None:
        """Closes the connection and ends its session (the device cannot be told anything any more)."""
        self.open = False
        if self.channel is not None:
            self.channel.end()
        self.gateway.left(self)
        self.writer.close()


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, gateway: MqttGateway) -> None:
        self.gateway = gateway

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.gateway.route(data, addr)


class MqttGateway:
    """The MQTT listener, the UDP socket, and the sessions they feed; ``async with`` runs it."""

    def __init__(self, settings: MqttGatewaySettings, turns: Turns, clock: Clock) -> None:
        self.settings, self.turns, self.clock = settings, turns, clock
        self.connections: dict[str, _Connection] = {}  # by client id
        self.by_ssrc: dict[int, MqttUdpChannel] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.rejected_datagrams = 0
        self.mqtt_address = (settings.host, settings.port)
        self.udp_address = (settings.host, settings.udp_port)
        self.public_host = public_udp_host(settings)
        self._server: asyncio.Server | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def sessions(self) -> dict[str, MqttUdpChannel]:
        """Each connected device's open session, by MAC."""
        return {
            c.device.mac: c.channel for c in self.connections.values() if c.channel is not None and not c.channel.closed
        }

    async def __aenter__(self) -> MqttGateway:
        s = self.settings
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: _Datagrams(self), local_addr=(s.host, s.udp_port))
        self._udp = transport
        self.udp_address = transport.get_extra_info("sockname")[:2]
        try:
            self._server = await asyncio.start_server(self._accept, s.host, s.port)
        except BaseException:
            transport.close()
            raise
        self.mqtt_address = self._server.sockets[0].getsockname()[:2]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections.values()):
            connection.hang_up()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        if self._udp is not None:
            self._udp.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await _Connection(self, reader, writer).run()
        finally:
            self._handlers.discard(task)

    async def joined(self, connection: _Connection) -> None:
        """A device is connected; one already connected with its client id is dropped (app.js addConnection)."""
        old = self.connections.get(connection.client_id)
        if old is not None:
            old.hang_up()
        self.connections[connection.client_id] = connection

    def left(self, connection: _Connection) -> None:
        if self.connections.get(connection.client_id) is connection:
            del self.connections[connection.client_id]

    def open_session(self, connection: _Connection) -> MqttUdpChannel:
        channel = MqttUdpChannel(self, connection)
        self.by_ssrc[channel.crypto.ssrc] = channel
        task = asyncio.create_task(self._serve(channel))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return channel

    async def _serve(self, channel: MqttUdpChannel) -> None:
        try:
            await DeviceSession(channel, self.settings.session, self.turns, self.clock).serve()
        finally:
            channel.end()

    def forget(self, channel: MqttUdpChannel) -> None:
        self.by_ssrc.pop(channel.crypto.ssrc, None)

    def route(self, data: bytes, address: tuple[str, int]) -> None:
        ssrc = ssrc_of(data)
        channel = self.by_ssrc.get(ssrc) if ssrc is not None else None
        if channel is None:
            self.rejected_datagrams += 1
            return
        channel.datagram(data, address)

    def sendto(self, data: bytes, address: tuple[str, int]) -> None:
        if self._udp is not None:
            self._udp.sendto(data, address)


def public_udp_host(settings: MqttGatewaySettings) -> str:
    """The UDP server's address as devices are told it; a wildcard bind address is no address to send to."""
    host = settings.udp_public_host or settings.host
    if is_wildcard(host):
        raise ValueError(
            f"MQTT and UDP bind {settings.host}, which devices cannot send to: "
            "give the address devices reach this machine at (pipeline.serve --public-host HOST)"
        )
    return host


def is_wildcard(host: str) -> bool:
    """0.0.0.0, :: and their spellings: every address of this machine, none a device can reach it at."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return host == ""  # a name: the resolver's business
