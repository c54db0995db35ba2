"""The xiaozhi MQTT + UDP front end: an MQTT server for devices, control JSON over MQTT, audio over UDP.

It behaves as the xiaozhi MQTT gateway (xiaozhi-mqtt-gateway ``app.js``, ``mqtt-protocol.js``) does
towards a stock firmware (``mqtt_connection`` has its rules), and feeds each device's session to a
``DeviceSession`` as the WebSocket front door does. Its hello answers with the UDP server, named
by ``udp_public_host`` (never a wildcard bind address), ``encryption: aes-128-ctr``, and a fresh key
and nonce whose ssrc routes the session's datagrams (``mqtt_channel`` has the datagram rules). A
second connection with the client id of a connected device is refused with CONNACK 2 (identifier
rejected) unless ``DoorSettings.duplicate_connect`` is ``replace``, where it replaces the first as in
the gateway (app.js addConnection); either is said. A device ``DoorSettings.allowed_devices`` does not
list is refused with CONNACK 5 (not authorised), and one over ``DoorSettings``' caps with CONNACK 3
(server unavailable). Connections that have not sent CONNECT wait at most ``connect_timeout_s``, and
past ``DoorSettings.max_waiting`` of them the one that has waited longest is dropped. What is refused
is said once per kind, then as a count.

Port 8883 is refused: firmware and desktop clients take it for MQTT over TLS and would start TLS
against this plain listener.

Why a small server of our own rather than a broker: amqtt (the one kept asyncio MQTT broker) routes
only to subscriptions, acknowledges QoS 1 where the gateway closes, times keep-alive as keep-alive
plus a delay rather than 1.5 times, and pins websockets 15.0.1 below what the lab's WebSocket side
runs; bending it would mean its private internals. mqtt-codec, the packet codec on offer, is from
2019 and no longer builds. What a device speaks is six packet types (``wire.mqtt_packets``), which
the gateway itself parses by hand, and owning them lets every rule be the gateway's exactly.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.clock import Clock
from pipeline.endpoints.doors import WaitingRoom
from pipeline.endpoints.repeats import Repeats, say_loop_errors_once
from pipeline.transport.server.device_session import DeviceSession
from pipeline.transport.server.mqtt_channel import MqttUdpChannel
from pipeline.transport.server.mqtt_connection import NOT_AUTHORIZED, MqttConnection
from pipeline.transport.server.requests import TurnSources
from pipeline.transport.server.server_settings import DoorSettings, SessionSettings
from pipeline.transport.wire import mqtt_packets as mp
from pipeline.transport.wire.udp import ssrc_of

TLS_PORT = 8883  # what firmware (mqtt_protocol.cc) and py-xiaozhi dial with TLS
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MqttFrontSettings:
    """Where the MQTT front end listens, what it checks, and how its sessions behave."""

    host: str = "127.0.0.1"  # where the MQTT listener and the UDP socket bind
    port: int = 1883  # MQTT; 0: any free port
    udp_port: int = 0  # 0: any free port (the gateway uses the MQTT port's number)
    udp_public_host: str = ""  # what the hello tells devices; "": host, which must then not be 0.0.0.0 or ::
    signature_key: str = field(default="", repr=False)  # "": passwords are not checked
    max_packet_bytes: int = 8192  # the gateway's max_mqtt_payload_size: one whole packet
    connect_timeout_s: float = 10.0  # a connection that sends no CONNECT within this is closed
    udp_rebind_after_s: float = 5.0  # a session's peer silent this long may move to another address (NAT)
    queue_limit: int = 256  # what may wait for one session: control messages and audio packets
    session: SessionSettings = field(default_factory=SessionSettings)
    door: DoorSettings = field(default_factory=DoorSettings)

    def __post_init__(self) -> None:
        refuse_tls_port(self.port)


def refuse_tls_port(port: int) -> None:
    """A ValueError for the port firmware and desktop clients dial with TLS: this listener is plain."""
    if port == TLS_PORT:
        raise ValueError(
            f"MQTT port {TLS_PORT} is MQTT over TLS to the firmware and desktop clients, and this listener "
            "is plain: they would start TLS against it. Choose another port (the gateway's is 1883)"
        )


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, front: MqttFrontEnd) -> None:
        self.front = front

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.front.route(data, addr)


class MqttFrontEnd:
    """The MQTT listener, the UDP socket, and the sessions they feed; ``async with`` runs it."""

    def __init__(
        self, settings: MqttFrontSettings, turns: TurnSources, clock: Clock, note: Callable[[str], None] | None = None
    ) -> None:
        self.settings, self.turns, self.clock = settings, turns, clock
        self.note = note or _log.warning  # what the operator is told: a device refused or replaced
        self.refusals = Repeats(self.note, now=lambda: clock.now_ns() / 1e9)  # each kind said once, then counted
        # connections that have not sent CONNECT yet; past the cap the one that has waited longest is dropped
        self.waiting: WaitingRoom[MqttConnection] = WaitingRoom(
            lambda c: c.writer.transport.abort(), settings.door.waiting_cap()
        )
        self.max_packet_bytes, self.connect_timeout_s = settings.max_packet_bytes, settings.connect_timeout_s
        self.signature_key, self.door, self.session = settings.signature_key, settings.door, settings.session
        self.connections: dict[str, MqttConnection] = {}  # by client id
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
    def udp_port(self) -> int:
        return self.udp_address[1]

    @property
    def sessions(self) -> dict[str, MqttUdpChannel]:
        """Each connected device's open session, by MAC."""
        return {
            c.device.mac: c.channel for c in self.connections.values() if c.channel is not None and not c.channel.closed
        }

    async def __aenter__(self) -> MqttFrontEnd:
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
        say_loop_errors_once()
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
        self.refusals.flush()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        connection = MqttConnection(self, reader, writer)
        closed = self.waiting.closed
        self.waiting.enter(connection)
        if self.waiting.closed > closed:
            self.refusals.say("full", f"{self.waiting.cap} MQTT connections wait for CONNECT: the oldest was dropped")
        try:
            await connection.run()
        finally:
            self.waiting.leave(connection)
            self._handlers.discard(task)

    def room_for(self, connection: MqttConnection) -> int:
        """``mp.ACCEPTED``; or the CONNACK code refusing the connection: 5 for a device not allowed, 2 for one
        already connected (``duplicate_connect = refuse``), 3 when the caps are reached (a device replacing itself
        always has room)."""
        if not self.door.admits(connection.device.mac):
            said = f"MQTT: {connection.client_id} from {connection.address} refused: not an allowed device"
            self.refusals.say("not allowed", said)
            return NOT_AUTHORIZED
        old = self.connections.get(connection.client_id)
        if old is not None and self.door.duplicate_connect == "refuse":
            self.refusals.say(
                "duplicate",
                f"MQTT: {connection.client_id} from {connection.address} refused: that client id is connected "
                f"from {old.address} (duplicate_connect = refuse)",
            )
            return mp.IDENTIFIER_REJECTED
        others = [c for c in self.connections.values() if c.client_id != connection.client_id]
        if len(others) >= self.door.max_connections:
            return mp.SERVER_UNAVAILABLE
        cap = self.door.max_per_address
        if cap and sum(1 for c in others if c.address == connection.address) >= cap:
            return mp.SERVER_UNAVAILABLE
        return mp.ACCEPTED

    def joined(self, connection: MqttConnection) -> None:
        """A device is connected; one already connected with its client id is dropped (app.js addConnection):
        ``room_for`` let it in only under ``duplicate_connect = replace``."""
        self.waiting.leave(connection)
        old = self.connections.get(connection.client_id)
        if old is not None:
            self.refusals.say(
                "replaced",
                f"MQTT: {connection.client_id} connected from {connection.address}; its connection from "
                f"{old.address} is dropped (duplicate_connect = replace)",
            )
            old.hang_up()
        self.connections[connection.client_id] = connection

    def left(self, connection: MqttConnection) -> None:
        if self.connections.get(connection.client_id) is connection:
            del self.connections[connection.client_id]

    def open_session(self, connection: MqttConnection) -> MqttUdpChannel:
        s = self.settings
        channel = MqttUdpChannel(
            self,
            connection.publish,
            connection.device.mac,
            connection.guard,
            self.clock,
            s.udp_rebind_after_s,
            s.queue_limit,
        )
        self.by_ssrc[channel.crypto.ssrc] = channel
        task = asyncio.create_task(self._serve(channel))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return channel

    async def _serve(self, channel: MqttUdpChannel) -> None:
        try:
            await DeviceSession(channel, self.session, self.turns, self.clock).serve()
        finally:
            channel.end()

    def forget(self, channel: MqttUdpChannel) -> None:
        if self.by_ssrc.get(channel.crypto.ssrc) is channel:
            del self.by_ssrc[channel.crypto.ssrc]

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


def public_udp_host(settings: MqttFrontSettings) -> str:
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
