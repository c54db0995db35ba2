"""The device's MQTT + UDP link: control JSON over MQTT as a stock firmware speaks it to the xiaozhi MQTT
gateway, audio over UDP in AES-CTR packets (``mqtt_protocol.cc``).

The device's UDP socket is connected to the address the server's hello named, so the operating
system drops datagrams from anyone else before they reach it. What the server sends is metered as
the WebSocket link meters it (``DownlinkLimits``): each MQTT packet counted as it begins and refused
when it announces more than ``max_message_bytes``, audio in audio time; a server past them is hung
up on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ssl
from urllib.parse import parse_qs, urlsplit

import aiomqtt

from pipeline.clock import Clock
from pipeline.endpoints.link.datagrams import UdpRelay
from pipeline.endpoints.link.proxy import LinkEmulator
from pipeline.tracing.timeline import PacketCounts
from pipeline.transport.device.device_settings import LinkSettings
from pipeline.transport.device.downlink_guard import DownlinkFlood, DownlinkGuard
from pipeline.transport.device.link import (
    DeviceError,
    Inbox,
    LinkGone,
    McpHandler,
    deliver,
    device_hello,
    hello_answer,
    next_control,
    no_session,
)
from pipeline.transport.device.ota_client import mqtt_config
from pipeline.transport.wire import mqtt_identity
from pipeline.transport.wire.failures import ChannelGone, ProtocolError
from pipeline.transport.wire.framing import Audio
from pipeline.transport.wire.inbound import Inbound
from pipeline.transport.wire.messages import Goodbye, Hello, Message, UdpParams, encode, read
from pipeline.transport.wire.mqtt_identity import MqttConfig
from pipeline.transport.wire.udp import PacketCrypto, PacketError, SequenceCheck

MQTT_HELLO_VERSION = 3  # mqtt_protocol.cc GetHelloMessage: always 3, whatever the WebSocket version


class _Downlink(asyncio.DatagramProtocol):
    """The device's UDP socket: every datagram to the link."""

    def __init__(self, link: MqttUdpLink) -> None:
        self.link = link

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.link.datagram(data)


class MqttUdpLink:
    """Control JSON over MQTT as a stock firmware speaks it to the xiaozhi MQTT gateway; audio over UDP.

    The device connects with the client id ``GROUP@@@MAC@@@UUID``, a base64 JSON username and the
    password signed with the gateway's key (``mqtt_auth``), publishes every message to one topic
    (``device-server``), and subscribes to nothing: the server pushes its messages to
    ``devices/p2p/MAC`` regardless. Where those come from depends on the URL:

    - ``mqtt://HOST:PORT[/PUBLISH_TOPIC][?group=GROUP]``: made here as the gateway's OTA makes them,
      the password signed with ``LinkSettings.mqtt_signature_key`` (none: an unsigned one, which a
      gateway without a key accepts);
    - ``http(s)://HOST:PORT/xiaozhi/ota/``: asked of that OTA endpoint as the firmware asks at boot,
      and taken from its answer's ``mqtt`` section (endpoint, client id, username, password, topic).
    """

    transport = "udp"

    def __init__(self, settings: LinkSettings, clock: Clock) -> None:
        self.settings = settings
        parts = urlsplit(settings.url)
        self.ota = parts.scheme in ("http", "https")
        where = f"MQTT as the OTA at {settings.url} says" if self.ota else f"MQTT {parts.hostname}:{parts.port or 1883}"
        self.label = f"xiaozhi server through {where} + UDP"
        if settings.profile is not None:
            self.label += f"; link profile {settings.profile.name}"
        self.config: MqttConfig | None = None
        self.proxy: LinkEmulator | None = None
        self.relay: UdpRelay | None = None
        self.session_id = ""
        self.inbox = Inbox(clock, settings.limits)
        self.guard = DownlinkGuard(settings.limits, clock)
        self.hung_up = False  # the device hung up on a server that sent more than it takes
        self.on_mcp: McpHandler | None = None
        self.client: aiomqtt.Client | None = None
        self.udp: asyncio.DatagramTransport | None = None
        self.crypto: PacketCrypto | None = None
        self.check = SequenceCheck()
        self.sequence = 0
        self.rejected = 0
        self._reader: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def is_open(self) -> bool:
        return self.client is not None and not self._closed and not self.inbox.gone

    async def open(self) -> None:
        s = self.settings
        try:
            async with asyncio.timeout(s.connect_timeout_s):
                self.config = await mqtt_config(s) if self.ota else mqtt_url_config(s)
                host, port = self.config.host_port()
                tls = ssl.create_default_context() if port == 8883 else None  # the firmware's rule for a bare host
                if s.profile is not None:  # the control channel goes through the TCP link emulator
                    self.proxy = LinkEmulator(s.profile, host, port)
                    host, port = "127.0.0.1", await self.proxy.start()
                self.client = aiomqtt.Client(
                    host,
                    port,
                    identifier=self.config.client_id,
                    username=self.config.username or None,
                    password=self.config.password or None,
                    keepalive=self.config.keepalive_s,
                    tls_context=tls,
                )
                _meter(self.client, self)
                ended = self.client._disconnected
                await self.client.__aenter__()
                _read_why(ended)  # a connection lost right after CONNACK: aiomqtt swaps this future for a new one
                self._reader = asyncio.create_task(self._read(self.client))  # no SUBSCRIBE: replies are pushed
                await self.send(device_hello("udp", MQTT_HELLO_VERSION))
                answer = await hello_answer(self, await next_control(self))
                self.session_id = answer.session_id or ""
                await self._open_udp(answer.udp)
        except DeviceError:
            await self.close()
            raise
        except (OSError, TimeoutError, ChannelGone, ProtocolError, aiomqtt.MqttError, PacketError, ValueError) as exc:
            await self.close()
            raise DeviceError(f"{s.url}: no session ({no_session(self, exc)})") from None

    async def _open_udp(self, udp: UdpParams | None) -> None:
        if udp is None:
            raise ProtocolError("the server's hello has no udp object")
        try:
            key, nonce = bytes.fromhex(udp.key), bytes.fromhex(udp.nonce)
        except ValueError as exc:
            raise ProtocolError(f"the hello's udp object is unusable: {exc}") from None
        address = (udp.server, udp.port)
        self.crypto = PacketCrypto(key, nonce)
        if self.settings.profile is not None:  # audio through the UDP relay: delayed, reordered, lost
            self.relay = await UdpRelay(self.settings.profile, address).__aenter__()
            address = self.relay.address
        loop = asyncio.get_running_loop()
        self.udp, _ = await loop.create_datagram_endpoint(lambda: _Downlink(self), remote_addr=address)

    async def _read(self, client: aiomqtt.Client) -> None:
        try:
            async for message in client.messages:  # whatever the server pushes, on whatever topic
                payload = message.payload
                if isinstance(payload, bytes | bytearray):
                    await self._control(bytes(payload))
        except aiomqtt.MqttError:
            pass
        finally:
            self.inbox.end("the MQTT connection is gone")

    def hang_up(self, flood: DownlinkFlood) -> None:
        """The server sent more than the device takes: nothing more is read from it. The MQTT connection
        drops at its next read (``_meter``), the UDP socket closes now."""
        self.hung_up = True
        self.inbox.hang_up(flood)
        if self.udp is not None:
            self.udp.close()

    async def _control(self, payload: bytes) -> None:
        if self.hung_up:
            return
        item = read(payload)
        if isinstance(item, Hello) and not self.session_id:
            self.session_id = item.session_id or ""  # MCP answers right after it need it
        if isinstance(item, Goodbye) and self._ours(item):
            # mqtt_protocol.cc: the channel closes; the next question opens a new one with a new hello
            self.inbox.end(f"the server ended the session: {item.reason or 'goodbye'}")
            return
        try:
            await deliver(self.inbox, self.on_mcp, item, len(payload))
        except DownlinkFlood as exc:
            self.hang_up(exc)

    def _ours(self, goodbye: Goodbye) -> bool:
        """The firmware closes only on a goodbye naming its session; one naming none is taken too."""
        return goodbye.session_id is None or goodbye.session_id == self.session_id

    def datagram(self, data: bytes) -> None:
        if self.crypto is None or self.hung_up:
            return
        try:
            packet = self.crypto.open(data)
        except PacketError:
            self.rejected += 1
            return
        if self.check.accept(packet.sequence):
            try:
                self.guard.audio(packet.payload)
                self.inbox.put(Audio(packet.payload, packet.timestamp), len(data))
            except DownlinkFlood as exc:
                self.hang_up(exc)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.client is not None and self.session_id and not self.inbox.gone:
            with contextlib.suppress(aiomqtt.MqttError, ChannelGone):
                await self.send(Goodbye(session_id=self.session_id))
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self.client is not None:
            with contextlib.suppress(aiomqtt.MqttError):
                await self.client.__aexit__(None, None, None)
            _read_why(self.client._disconnected)
        if self.udp is not None:
            self.udp.close()
        if self.relay is not None:
            await self.relay.__aexit__(None, None, None)
        if self.proxy is not None:
            await self.proxy.stop()

    async def send(self, message: Message) -> None:
        if self.client is None or self.config is None or (self._closed and not isinstance(message, Goodbye)):
            raise ChannelGone("not connected")
        try:
            await self.client.publish(self.config.publish_topic, encode(message), qos=0)
        except aiomqtt.MqttError as exc:
            raise ChannelGone(f"the MQTT connection is gone ({exc})") from None

    async def send_audio(self, opus: bytes, timestamp_ms: int) -> None:
        if self.udp is None or self.crypto is None or self._closed:
            raise ChannelGone("no audio channel")
        self.sequence += 1
        self.udp.sendto(self.crypto.seal(opus, timestamp_ms, self.sequence))

    async def recv_at(self) -> tuple[int, Inbound]:
        """The next message and when it arrived."""
        return await self.inbox.get()

    def turn_started(self, drain: bool = True) -> int:
        """A new turn: the sequence counts start again; what is still waiting belongs to none (``drain``),
        such as UDP frames that came after the last ``tts stop`` overtook them; the audio frames thrown away."""
        self.check = self.check.next_turn()
        return self.inbox.drain() if drain else 0

    def last_arrival_ns(self) -> int | None:
        return self.inbox.last_ns

    def lost(self) -> LinkGone | None:
        return self.inbox.why()

    def packet_counts(self) -> PacketCounts | None:
        return PacketCounts(self.check.received, self.check.lost, self.check.late)


def _meter(client: aiomqtt.Client, link: MqttUdpLink) -> None:
    """Meter what the MQTT server sends where paho reads it from the socket.

    paho reads a packet of up to 256 MiB whole before it hands it over, and aiomqtt queues whatever it
    is handed; neither has a limit to set. So the link's guard sits on paho's socket read (``_sock_recv``,
    private: paho offers no hook there): each packet is counted as its first byte arrives, one announcing
    a body over ``max_message_bytes`` is refused before its body is read, and once the device has hung up
    every read fails, which paho takes as the connection lost."""
    paho = client._client
    recv = paho._sock_recv
    cap = link.settings.limits.max_message_bytes

    def metered(bufsize: int) -> bytes:
        if link.hung_up:
            raise ConnectionError("the device hung up")
        packet = paho._in_packet
        if packet["have_remaining"] and packet["remaining_length"] > cap:
            link.hang_up(DownlinkFlood(f"an MQTT packet of {packet['remaining_length']} bytes (over {cap})"))
            raise ConnectionError("the device hung up")
        data = recv(bufsize)
        if data and packet["command"] == 0:  # a packet's first byte
            try:
                link.guard.control()
            except DownlinkFlood as exc:
                link.hang_up(exc)
                raise ConnectionError("the device hung up") from None
        return data

    paho._sock_recv = metered  # type: ignore[method-assign]


def _read_why(ended: asyncio.Future[None]) -> None:
    """aiomqtt keeps why its connection ended in a future that only its message reader reads; a reader
    cancelled first leaves it unread, which asyncio reports on stderr as an error nobody retrieved."""
    if ended.done() and not ended.cancelled():
        ended.exception()


def mqtt_url_config(settings: LinkSettings) -> MqttConfig:
    """``mqtt://HOST:PORT[/PUBLISH_TOPIC][?group=GROUP]`` as the gateway's OTA would configure this device."""
    parts = urlsplit(settings.url)
    if not parts.hostname:
        raise ValueError(f"{settings.url!r}: mqtt://HOST:PORT is expected")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    group = parse_qs(parts.query).get("group", [mqtt_identity.GROUP])[0]
    config = mqtt_identity.device_config(
        f"{host}:{parts.port or 1883}", settings.device_id, settings.client_id, settings.mqtt_signature_key, group
    )
    topic = parts.path.strip("/")
    return dataclasses.replace(config, publish_topic=topic) if topic else config
